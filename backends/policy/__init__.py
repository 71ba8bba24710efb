"""Policy wrappers: refuse, throttle and audit backend operations.

:class:`PolicyBackend` (:mod:`.chain`) wraps any backend and implements every
protocol method itself, so a policy cannot be bypassed. Each call goes
through the same steps:

1. every path argument is validated (:func:`validate_path`) and the
   *normalised* path is what policies see and what the inner backend gets,
   so a check and the action can never disagree about the target;
2. ``Policy.admit(operation)`` once per call (rate limits, operation bans);
3. ``Policy.check(call, inner)`` once per target (``upload``/``download``
   are checked per file, and refused files get their own error results while
   the rest go through);
4. the inner backend runs, and one audit record per target is emitted
   (:mod:`.recording`).

Refusals are error values (``code="permission_denied"``, or ``timeout`` for
a rate limit that would wait too long) whose message names the policy and
the rule, never exceptions.

Modules: :mod:`.base` (Call, Refusal, Policy), :mod:`.chain` (the wrapper),
:mod:`.recording` (audit hookup), one module per policy kind
(:mod:`.deny_write`, :mod:`.secrets`, :mod:`.rate_limit`,
:mod:`.deny_operations`) and :mod:`.config` (named instances, kind registry,
:func:`build_policy_chain`). Exports load lazily (see :mod:`filegate._lazy`).
"""

from typing import TYPE_CHECKING

from filegate._lazy import attach

if TYPE_CHECKING:
    from .base import (
        CONTENT_OPERATIONS,
        WRITE_OPERATIONS,
        Call,
        ContentOperation,
        Policy,
        ProtocolOperation,
        Refusal,
        WriteOperation,
    )
    from .chain import PolicyBackend
    from .config import (
        POLICY_KINDS,
        DenyOperationsSpec,
        DenyWriteSpec,
        PolicyConfig,
        PolicySpec,
        RateLimitSpec,
        SecretScanSpec,
        build_policy_chain,
        register_policy_kind,
    )
    from .deny_operations import DenyOperationsPolicy
    from .deny_write import DenyWritePolicy
    from .rate_limit import RateLimitPolicy, TokenBucket
    from .secrets import BUILTIN_SECRET_RULES, SecretRule, SecretScanPolicy

__getattr__, __dir__, __all__ = attach(__name__, __file__)
