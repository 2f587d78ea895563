"""One ``__eq__``, ``__hash__`` and ``__repr__`` shared by every record class.

``dataclasses`` writes each method it generates as source and compiles it with ``exec`` when
the class is made: six compilations for a frozen class (``__init__``, ``__repr__``,
``__eq__``, ``__setattr__``, ``__delattr__``, ``__hash__``), at every start of patchkit and
for each of the ~50 records a command imports. A record is declared instead as

    @dataclass(frozen=True, eq=False, repr=False)
    class Fix(Record): ...

(``MutableRecord`` for a record that is not frozen): the dataclass still generates
``__init__`` and the frozen ``__setattr__``/``__delattr__`` (``FrozenInstanceError``), and the
three value methods come from here, written once. They behave as the generated ones do
(docs/design.md, "Records"): equality by the fields in order, only between instances of the
same class (anything else: ``NotImplemented``); the hash of the tuple of those fields; the
repr ``Name(field=value, ...)``; a field's ``compare``, ``hash`` and ``repr`` options are
honoured. Which fields take part is read from the class's dataclass fields the first time an
instance of it is compared, hashed or shown.

Standard library only, for Python 3.8 and later (the engine's rule)."""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter
from typing import Any, Callable, Dict, Tuple

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
    """The base of a frozen record: equality, hash and repr by field."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(_methods(self.__class__)[1](self))


class MutableRecord(_ByField):
    """The base of a record that is not frozen: equality and repr by field, and no hash (as a
    dataclass with ``eq=True`` that is not frozen)."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]
