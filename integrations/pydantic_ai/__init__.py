"""Filegate as a Pydantic AI workspace (``pip install 'filegate[pydantic-ai]'``).

:class:`FilegateWorkspace` implements Pydantic AI's workspace protocols
(``WorkspaceBackend``, ``SupportsFilesystem``, ``SupportsCommands``) over one
backend on a Filegate tools worker; :class:`FilegateFileWorkspace` offers the
files without commands. :class:`FilegateCapability` gives an agent that
workspace and decides a call an ``interrupt`` rule stops through Filegate's
approval handlers in the agent's workflow; :func:`pydantic_ai_data_converter`
is the one data converter a client with both plugins needs. See
``docs/pydantic-ai.md``.

Lazy (:mod:`filegate._lazy`): importing the package loads no framework.
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .approvals import FilegateCapability
    from .converter import FilegatePydanticAIPayloadConverter, pydantic_ai_data_converter
    from .workspace import FilegateFileWorkspace, FilegateWorkspace

__getattr__, __dir__, __all__ = attach(__name__, __file__)
