"""The embedded dev stack: a Temporal dev server and an S3 server (SeaweedFS) from wheels.

- :mod:`.servers`: :class:`~filegate.devstack.servers.TemporalDevServer` and
  what every managed server shares (loopback, ports, start and stop);
- :mod:`.s3`: the S3 server;
- :mod:`.stack`: the stack one state directory's commands share (``run``,
  ``demo``, ``dev``);
- :mod:`.failures`: why a server did not start, in one line.

Why a package of its own: the stack serves the demo, ``filegate run`` and
``dev``, the tests and the benchmarks. It is not a backend and never runs in
a worker (production talks to real servers; the ``devstack`` extra brings
the programs), so it sits beside :mod:`filegate.backends`, independent of it,
and imports no workflow, activity or worker (``.importlinter``).
"""
