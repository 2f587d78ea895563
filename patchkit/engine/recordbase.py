"""The value methods every record class shares, and ``record_dataclass``, which declares a
frozen record without having its methods written and compiled for each class.

``dataclasses`` writes each method it generates as source and compiles it when the class is
made: six compilations for a frozen class (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``, ``__delattr__``), at every start of patchkit, for each of the
~45 records a command imports (about a fifth of a status's instructions). So a record is
declared

    @record_dataclass(frozen=True)
    class Fix(Record): ...

    @dataclass(eq=False, repr=False)
    class FixSpec(MutableRecord): ...  # the engine's few records that are not frozen

and ``dataclasses`` compiles only its ``__init__``; the rest is written once, here, and
behaves as the generated methods do (docs/design.md, "Records"):

- equality by the fields in order, only between instances of the same class (anything else:
  ``NotImplemented``); the hash of the tuple of those fields; the repr ``Name(field=value,
  ...)``; a field's ``compare``, ``hash`` and ``repr`` options are honoured (which fields take
  part is read from the class's fields the first time it is compared, hashed or shown);
- a frozen record's fields cannot be assigned or deleted (``FrozenInstanceError``), nor can
  other attributes be set: its ``__init__`` sets each field once, and a field that is already
  set is never set again (``__post_init__`` normalises with ``object.__setattr__``, as in any
  frozen dataclass). Type checkers see ``record_dataclass`` as ``dataclasses.dataclass``.

The shared ``__setattr__`` makes a frozen record's construction a Python call per field
(about 0.4 us each): a record made once per hunk, file or patch of a series (``Hunk``,
``Placement``, ``FileChange``, ``HunkPlacement``, ``CheckResult``, ``FileOutcome``,
``PatchRef``: 220,000 field assignments in the 2,152-patch drift apply) is declared
``@dataclass(frozen=True, eq=False, repr=False)`` on ``Record`` instead, and keeps the
generated frozen ``__init__``, ``__setattr__`` and ``__delattr__``.

Standard library only, for Python 3.8 and later (the engine's rule)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, Type, TypeVar

_Getter = Callable[[Any], Tuple[Any, ...]]
#: per record class: the getters of the compared and the hashed fields' values, and the
#: names of the shown fields (what ``dataclasses`` would have written into the methods)
_METHODS: Dict[type, Tuple[_Getter, _Getter, Tuple[str, ...]]] = {}


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


class _ByField:
    """Equality and repr by field (the hash is the subclass's)."""

    __slots__ = ()

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
    """The base of a frozen record (declared with ``record_dataclass(frozen=True)``): equality, hash and repr
    by field; its fields set once, by ``__init__``."""

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
    """The base of a record that is not frozen: equality and repr by field, and no hash (as a
    dataclass with ``eq=True`` that is not frozen)."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


_R = TypeVar("_R", bound=Type[Record])


def _frozen_record(*, frozen: bool) -> Callable[[_R], _R]:
    """``record_dataclass(frozen=True)``: the dataclass of a subclass of ``Record``, which writes only its
    ``__init__`` (``Record`` gives the rest, its frozenness included)."""
    if not frozen:
        raise TypeError("record_dataclass() declares frozen records; a mutable one is "
                        "@dataclass(eq=False, repr=False) on MutableRecord")

    def declare(cls: _R) -> _R:
        if not issubclass(cls, Record):
            raise TypeError("%s: a frozen record must subclass Record" % cls.__qualname__)
        dataclass(eq=False, repr=False)(cls)  # in place: the same class, its __init__ added
        return cls

    return declare


if TYPE_CHECKING:  # to a type checker, a record is the frozen dataclass it behaves as
    from dataclasses import dataclass as record_dataclass
else:
    record_dataclass = _frozen_record
