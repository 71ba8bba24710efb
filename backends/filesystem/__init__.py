"""The filesystem backend: real files under a root directory, with escape made impossible.

- :mod:`.backend`: :class:`FilesystemBackend`, the file operations;
- :mod:`.host_files`: what every backend over host files shares (limits,
  errors, call tokens), the sandbox backends too;
- :mod:`.host_tree`: what a recursive delete would remove;
- :mod:`.walk` and :mod:`.ripgrep`: the two search strategies (pure Python, ripgrep);
- :mod:`.search_clock`: the soft time limit of a search.

Why a package of its own: the backend and its helpers are one concept that
had spread over six top-level modules of :mod:`filegate.backends`.
:class:`FilesystemBackend` loads lazily, so importing
``filegate.backends.filesystem.host_files`` (the shell and sandbox backends
do) does not import the backend itself.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .backend import FilesystemBackend

__getattr__, __dir__, __all__ = attach(__name__, __file__)
