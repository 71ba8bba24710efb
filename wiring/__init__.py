"""How Filegate's workers and clients are put together: the shared client
(:mod:`.connection`), worker tuning (:mod:`.tuning`) and the worker roles
(:mod:`.roles`). :class:`~filegate.plugin.FilegatePlugin` composes them; the
command line's factories are :mod:`filegate.worker`."""
