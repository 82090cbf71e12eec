"""What `@workflow.defn` records about a workflow class: its name, run method, signal and query handlers."""

from __future__ import annotations

import inspect
import typing
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ostinato.sdk.versioning import VersioningBehavior

RUN_ATTR = "__ostinato_run__"
SIGNAL_ATTR = "__ostinato_signal__"
QUERY_ATTR = "__ostinato_query__"
UPDATE_ATTR = "__ostinato_update__"  # the update's name ("" for the dynamic handler)
VALIDATOR_ATTR = "__ostinato_update_validator__"  # the name of the update it validates
UNFINISHED_ATTR = "__ostinato_unfinished_policy__"
INIT_ATTR = "__ostinato_init__"  # `@workflow.init`: __init__ takes the workflow's arguments
DEFN_ATTR = "__ostinato_workflow__"


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    cls: type
    run: Callable[..., Any]
    signals: dict[str, Callable[..., Any]] = field(default_factory=dict)
    queries: dict[str, Callable[..., Any]] = field(default_factory=dict)
    updates: dict[str, Callable[..., Any]] = field(default_factory=dict)  # "" is the dynamic handler
    validators: dict[str, Callable[..., Any]] = field(default_factory=dict)
    init_takes_args: bool = False
    # Worker versioning: PINNED or AUTO_UPGRADE (`@workflow.defn(versioning_behavior=...)`), else the worker's default
    versioning_behavior: VersioningBehavior = VersioningBehavior.UNSPECIFIED

    def update_handler(self, name: str) -> tuple[Callable[..., Any] | None, bool]:
        """The handler of update `name` and whether it is the dynamic one (called with the name and raw args)."""
        if name in self.updates and name:
            return self.updates[name], False
        return self.updates.get(""), True

    def arg_hints(self, fn: Callable[..., Any]) -> list[Any]:
        """Type hints of the parameters after `self`, to decode arguments into the right types."""
        return parameter_hints(fn)[1:]

    def result_hint(self) -> Any:
        return _hints(self.run).get("return")


# Type hints and signatures are read on every activity scheduled and every handler run, and resolving them is slow
# (`get_type_hints` evaluates the annotations: 6% of a worker's time in a ten-activity workflow). They are kept per
# function, weakly, so a function defined at run time does not stay alive for the cache's sake.
_HINTS: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, Any]] = weakref.WeakKeyDictionary()
_PARAMETERS: weakref.WeakKeyDictionary[Callable[..., Any], tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The function's resolved annotations (a bound method's are its function's). Read, never change, the result."""
    target = getattr(fn, "__func__", fn)
    if not inspect.isfunction(target):
        return _resolve(fn)
    found = _HINTS.get(target)
    if found is None:
        found = _HINTS[target] = _resolve(target)
    return found


def _resolve(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: decode as plain JSON values instead
        return {}


def parameter_hints(fn: Callable[..., Any]) -> list[Any]:
    """The hints of the positional parameters, in order (a bound method's without `self`)."""
    if not inspect.isfunction(fn):  # bound methods are made anew on every access: cache their functions only
        return _parameter_hints(fn)
    found = _PARAMETERS.get(fn)
    if found is None:
        found = _PARAMETERS[fn] = tuple(_parameter_hints(fn))
    return list(found)


def _parameter_hints(fn: Callable[..., Any]) -> list[Any]:
    hints = _hints(fn)
    return [hints.get(p.name) for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def build(cls: type, name: str | None,
          versioning_behavior: VersioningBehavior = VersioningBehavior.UNSPECIFIED) -> WorkflowDefinition:
    run = None
    signals: dict[str, Callable[..., Any]] = {}
    queries: dict[str, Callable[..., Any]] = {}
    updates: dict[str, Callable[..., Any]] = {}
    validators: dict[str, Callable[..., Any]] = {}
    for attr in dir(cls):
        member = getattr(cls, attr, None)
        if member is None:
            continue
        if getattr(member, RUN_ATTR, False):
            if run is not None:
                raise TypeError(f"workflow {cls.__name__} has more than one @workflow.run method")
            if not inspect.iscoroutinefunction(member):
                raise TypeError(f"{cls.__name__}.{attr}: @workflow.run must be an async method")
            run = member
        if (signal := getattr(member, SIGNAL_ATTR, None)) is not None:
            signals[signal] = member
        if (query := getattr(member, QUERY_ATTR, None)) is not None:
            if inspect.iscoroutinefunction(member):
                raise TypeError(f"{cls.__name__}.{attr}: a @workflow.query must be a plain method (it cannot wait)")
            queries[query] = member
        if (update := getattr(member, UPDATE_ATTR, None)) is not None:
            if update in updates:
                raise TypeError(f"workflow {cls.__name__} has two handlers of update {update or '(dynamic)'!r}")
            updates[update] = member
        if (validated := getattr(member, VALIDATOR_ATTR, None)) is not None:
            if inspect.iscoroutinefunction(member):
                raise TypeError(f"{cls.__name__}.{attr}: an update validator must be a plain method (it cannot wait)")
            validators[validated] = member
    if run is None:
        raise TypeError(f"workflow {cls.__name__} needs one async method decorated with @workflow.run")
    if (unknown := sorted(set(validators) - set(updates))):
        raise TypeError(f"workflow {cls.__name__}: validators of updates it has no handler for: {unknown}")
    init_takes_args = bool(getattr(vars(cls).get("__init__"), INIT_ATTR, False)) or any(
        getattr(vars(base).get("__init__"), INIT_ATTR, False) for base in cls.__mro__[1:])
    return WorkflowDefinition(name or cls.__name__, cls, run, signals, queries, updates, validators,
                              init_takes_args, versioning_behavior)


def definition_of(workflow: type | Callable[..., Any] | str) -> WorkflowDefinition:
    """The definition of a workflow class, or of the class owning a `@workflow.run` method."""
    target: Any = workflow
    if not isinstance(target, type):
        owner = getattr(target, "__qualname__", "").rpartition(".")[0]
        module = inspect.getmodule(target)
        target = getattr(module, owner, None) if owner and module else None
    defn = getattr(target, DEFN_ATTR, None)
    if not isinstance(defn, WorkflowDefinition):
        raise TypeError(f"{workflow!r} is not a @workflow.defn class (or its @workflow.run method)")
    return defn


def call_arguments(positional: tuple[Any, ...], args: Sequence[Any] | None) -> tuple[Any, ...]:
    """The arguments of a workflow or activity call: given positionally (`start_workflow(Wf.run, a, b, ...)`) or,
    as Temporal's SDK also takes them, as `args=[a, b]`; not both."""
    if args is None:
        return positional
    if positional:
        raise TypeError("pass the arguments positionally or as args=[...], not both")
    return tuple(args)
