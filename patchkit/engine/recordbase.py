"""The methods every record class shares, and ``record_dataclass``, which declares a record
without having any method written and compiled for its class.

``dataclasses`` writes each method it generates as source and compiles it when the class is
made, at every start of patchkit: six compilations for a frozen class (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``), for each of the
~50 records a command imports (about a fifth of a status's instructions). So a record is
declared

    @record_dataclass(frozen=True)
    class Fix(Record): ...

    @record_dataclass(frozen=False)
    class FixSpec(MutableRecord): ...  # the engine's few records that are not frozen

and ``dataclasses`` compiles nothing for it (it still collects the fields, so ``fields``,
``replace`` and ``asdict`` work); the methods are written once, here, and behave as the
generated ones do (docs/design.md, "Records"):

- ``__init__`` takes the fields that are in ``__init__``, in order, positionally or by name,
  fills the others from their ``default`` or ``default_factory``, and calls ``__post_init__``
  if the class has one; a missing, unexpected or repeated argument is the ``TypeError`` the
  generated ``__init__`` raises. It puts the fields into the instance's ``__dict__`` at once
  (what ``object.__setattr__`` does for a plain attribute), about as fast as the generated
  frozen ``__init__`` that sets them one by one;
- equality by the fields in order, only between instances of the same class (anything else:
  ``NotImplemented``); the hash of the tuple of those fields; the repr ``Name(field=value,
  ...)``; a field's ``compare``, ``hash`` and ``repr`` options are honoured;
- a frozen record's fields cannot be assigned or deleted (``FrozenInstanceError``), nor can
  other attributes be set (``__post_init__`` normalises with ``object.__setattr__``, as in any
  frozen dataclass). Type checkers see ``record_dataclass`` as ``dataclasses.dataclass``.

What each class's methods need (its ``__init__``'s parameters, which fields are compared,
hashed and shown) is read from its fields the first time an instance is made, compared,
hashed or shown, once per class and process.

Standard library only, for Python 3.8 and later (the engine's rule)."""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, Type, TypeVar

_Getter = Callable[[Any], Tuple[Any, ...]]
#: per record class: the getters of the compared and the hashed fields' values, and the
#: names of the shown fields (what ``dataclasses`` would have written into the methods)
_METHODS: Dict[type, Tuple[_Getter, _Getter, Tuple[str, ...]]] = {}
#: per record class, what its ``__init__`` takes: the names of its parameters in order, the
#: default of each that has one (a ``default_factory`` as a ``_Factory``), the fields outside
#: ``__init__`` that have a default with theirs, and whether the class has a ``__post_init__``
_Init = Tuple[Tuple[str, ...], Dict[str, Any], Tuple[Tuple[str, Any], ...], bool]
_INITS: Dict[type, _Init] = {}


def _tuple_getter(names: Tuple[str, ...]) -> _Getter:
    if len(names) >= 2:
        return attrgetter(*names)  # type: ignore[return-value]  # a tuple, for 2 names or more
    return lambda obj: tuple(getattr(obj, name) for name in names)


def _methods(cls: type) -> Tuple[_Getter, _Getter, Tuple[str, ...]]:
    found = _METHODS.get(cls)
    if found is None:
        of = fields(cls)
        compared = tuple(f.name for f in of if f.compare)
        hashed = tuple(f.name for f in of if (f.compare if f.hash is None else f.hash))
        found = _METHODS[cls] = (_tuple_getter(compared), _tuple_getter(hashed),
                                 tuple(f.name for f in of if f.repr))
    return found


class _Factory:
    """A field's ``default_factory``, called for each instance made without the field."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def _default(f: Any) -> Any:
    """A field's default as ``_init_of`` keeps it: the value, a ``_Factory``, or ``MISSING``."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return _Factory(f.default_factory)
    return MISSING


def _init_of(cls: type) -> _Init:
    found = _INITS.get(cls)
    if found is None:
        of = [(f.name, f.init, _default(f)) for f in fields(cls)]
        params = tuple(name for name, init, _ in of if init)
        defaults = {name: default for name, init, default in of
                    if init and default is not MISSING}
        rest = tuple((name, default) for name, init, default in of
                     if not init and default is not MISSING)
        found = _INITS[cls] = (params, defaults, rest, hasattr(cls, "__post_init__"))
    return found


def _value(default: Any) -> Any:
    return default.make() if default.__class__ is _Factory else default


class _Signature:
    """A record class's ``__signature__``, made when asked (``inspect.signature``, ``help``):
    its fields in ``__init__`` as the generated ``__init__`` would take them, a default
    factory shown as ``<factory>``."""

    def __get__(self, obj: Any, cls: type) -> Any:
        from inspect import Parameter, Signature

        params, defaults, _rest, _post = _INITS.get(cls) or _init_of(cls)
        types = {f.name: f.type for f in fields(cls)}
        return Signature([Parameter(name, Parameter.POSITIONAL_OR_KEYWORD,
                                    default=_shown(defaults.get(name, Parameter.empty)),
                                    annotation=types[name]) for name in params],
                         return_annotation=None)


class _FactoryDefault:
    """How a signature shows a default made by a factory (as ``dataclasses`` does)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY_DEFAULT = _FactoryDefault()


def _shown(default: Any) -> Any:
    return _FACTORY_DEFAULT if default.__class__ is _Factory else default


class _ByField:
    """``__init__``, equality and repr by field (the hash is the subclass's)."""

    __slots__ = ()
    __signature__ = _Signature()

    if not TYPE_CHECKING:  # a type checker sees each record's own __init__ (record_dataclass)
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            cls = self.__class__
            params, defaults, rest, post_init = _INITS.get(cls) or _init_of(cls)
            given = len(args)
            if given > len(params):
                raise TypeError("%s.__init__() takes %d positional arguments but %d were given"
                                % (cls.__qualname__, len(params) + 1, given + 1))
            values = self.__dict__  # a field is a plain attribute: set as object.__setattr__ would
            values.update(zip(params, args))
            if kwargs or given < len(params):
                missing = []
                for name in params[given:]:
                    value = kwargs.pop(name, MISSING) if kwargs else MISSING
                    if value is MISSING:
                        if name not in defaults:
                            missing.append(name)
                            continue
                        value = _value(defaults[name])
                    values[name] = value
                if kwargs:
                    name = next(iter(kwargs))
                    how = ("got multiple values for argument" if name in params
                           else "got an unexpected keyword argument")
                    raise TypeError("%s.__init__() %s %r" % (cls.__qualname__, how, name))
                if missing:
                    raise TypeError("%s.__init__() missing %d required argument%s: %s"
                                    % (cls.__qualname__, len(missing),
                                       "s" if len(missing) > 1 else "",
                                       ", ".join(repr(name) for name in missing)))
            for name, default in rest:
                values[name] = _value(default)
            if post_init:
                self.__post_init__()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        values = _methods(self.__class__)[0]
        return values(self) == values(other)

    def __repr__(self) -> str:
        shown = _methods(self.__class__)[2]
        return "%s(%s)" % (self.__class__.__qualname__,
                           ", ".join("%s=%r" % (name, getattr(self, name)) for name in shown))


class Record(_ByField):
    """The base of a frozen record (declared with ``record_dataclass(frozen=True)``): its
    ``__init__``, equality, hash and repr by field; its fields set once, by ``__init__``."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(_methods(self.__class__)[1](self))

    if not TYPE_CHECKING:  # a type checker knows the record is frozen from ``record_dataclass``
        def __setattr__(self, name: str, value: Any) -> None:
            if name in self.__dict__ or name not in self.__dataclass_fields__:
                raise FrozenInstanceError("cannot assign to field %r" % name)
            object.__setattr__(self, name, value)

        def __delattr__(self, name: str) -> None:
            raise FrozenInstanceError("cannot delete field %r" % name)


class MutableRecord(_ByField):
    """The base of a record that is not frozen (declared with ``record_dataclass(frozen=False)``):
    its ``__init__``, equality and repr by field, and no hash (as a dataclass with ``eq=True``
    that is not frozen)."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


_R = TypeVar("_R", bound=Type[_ByField])


def _record(*, frozen: bool) -> Callable[[_R], _R]:
    """``record_dataclass(frozen=...)``: the dataclass of a subclass of ``Record`` (frozen) or
    ``MutableRecord``, for which ``dataclasses`` writes no method (the base gives them all)."""
    base = Record if frozen else MutableRecord

    def declare(cls: _R) -> _R:
        if not issubclass(cls, base):
            raise TypeError("%s: a %s record must subclass %s" % (
                cls.__qualname__, "frozen" if frozen else "mutable", base.__name__))
        # in place: the same class, its fields collected; nothing written or compiled
        dataclass(init=False, eq=False, repr=False)(cls)
        return cls

    return declare


if TYPE_CHECKING:  # to a type checker, a record is the dataclass it behaves as
    from dataclasses import dataclass as record_dataclass
else:
    record_dataclass = _record
