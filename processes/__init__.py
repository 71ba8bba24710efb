"""Running a command's processes under supervision: bounds, cleanup, no leaked secrets.

- :mod:`.reaper`: :class:`~filegate.processes.reaper.CommandBounds` and the
  supervised start of a command; :mod:`.supervisor_main` is the per-command
  supervisor it runs as a ``python -I -S`` script (by path);
- :mod:`.cgroups`: a cgroup per command, where the worker can make one;
- :mod:`.guard`: the capability drop before a root worker's command runs
  (also a script), and whether a pid still runs;
- :mod:`.executables`: where the programs Filegate runs are found (wheels, then ``PATH``).

Why a package of its own: supervising a command's process tree does not
depend on which backend runs the command (local shell, bubblewrap sandbox,
ripgrep for the filesystem backend) nor on the dev stack, which finds its
servers' programs here too. So it sits below :mod:`filegate.backends` and
imports nothing from it (``.importlinter``): the backends turn their
settings into :class:`~filegate.processes.reaper.CommandBounds`
(:meth:`filegate.backends.settings.CommandSettings.bounds`).
"""
