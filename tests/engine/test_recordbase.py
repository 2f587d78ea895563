"""A record's shared ``__init__`` (patchkit.engine.recordbase) takes its arguments as the
``__init__`` that ``dataclasses`` would have generated: the same fields set, the same calls
refused with ``TypeError``, defaults and default factories filled, ``__post_init__`` run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Tuple

import pytest

from patchkit.engine.recordbase import MutableRecord, Record, record_dataclass


def _declare(name: str, decorate: Callable[[type], type], base: type) -> Any:
    """One class body of every kind of field, declared by ``decorate`` on ``base``: the
    shared record and the real dataclass it is compared with have the same fields."""

    def __post_init__(self: Any) -> None:
        object.__setattr__(self, "g", ("post", self.a))

    body = {
        "__module__": __name__, "__qualname__": name, "__doc__": f"{name}: every kind of field.",
        "__annotations__": {"a": "int", "b": "str", "c": "Tuple[int, ...]", "d": "List[int]",
                            "e": "int", "f": "Dict[str, int]", "g": "Any"},
        "c": (), "d": field(default_factory=list), "e": field(default=7, init=False),
        "f": field(default_factory=dict, compare=False),
        "g": field(default=None, init=False, repr=False), "__post_init__": __post_init__}
    return decorate(type(name, (base,), body))


Shared = _declare("Shared", record_dataclass(frozen=True), Record)
Generated = _declare("Generated", dataclass(frozen=True), object)  # as dataclasses writes it


@record_dataclass(frozen=False)
class Mutable(MutableRecord):
    """A mutable record with a field outside ``__init__`` and no default."""

    x: int
    y: int = 2
    z: int = field(init=False)


CALLS: List[Tuple[Tuple[Any, ...], Dict[str, Any]]] = [
    ((1, "b"), {}),
    ((1,), {"b": "b"}),
    ((), {"b": "b", "a": 1}),
    ((1, "b", (3,)), {"d": [4]}),
    ((1, "b", (3,), [4], {"k": 1}), {}),
    ((1, "b"), {"f": {"k": 2}, "c": (5,)}),
    # refused alike
    ((), {}),
    ((1,), {}),
    ((1, "b", (), [], {}, "extra"), {}),
    ((1, "b"), {"a": 2}),
    ((1, "b"), {"e": 3}),
    ((1, "b"), {"nope": 3}),
    ((), {"a": 1, "c": ()}),
]


def _fields(obj: Any) -> Dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_shared_init_takes_what_the_generated_one_takes(args: Tuple[Any, ...],
                                                         kwargs: Dict[str, Any]) -> None:
    try:
        expected: Any = _fields(Generated(*args, **kwargs))
    except TypeError:
        expected = TypeError
    if expected is TypeError:
        with pytest.raises(TypeError, match=r"^Shared\.__init__\(\) "):
            Shared(*args, **kwargs)
    else:
        made = Shared(*args, **kwargs)
        assert _fields(made) == expected
        assert made.g == ("post", made.a)


def test_default_factories_give_each_record_its_own_value() -> None:
    one, two = Shared(1, "b"), Shared(1, "b")
    assert one.d == [] and one.d is not two.d and one.f is not two.f
    assert one == two  # f is not compared
    assert Shared(1, "b", f={"k": 1}) == one and Shared(2, "b") != one


def test_messages_name_the_argument() -> None:
    with pytest.raises(TypeError, match=r"missing 2 required arguments: 'a', 'b'"):
        Shared()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"got multiple values for argument 'a'"):
        Shared(1, "b", a=1)  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'nope'"):
        Shared(1, "b", nope=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"takes 6 positional arguments but 7 were given"):
        Shared(1, "b", (), [], {}, 1)  # type: ignore[call-arg]


def test_frozen_and_mutable_records_stay_so() -> None:
    made = Shared(1, "b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2  # type: ignore[misc]
    assert dataclasses.replace(made, a=2).a == 2 and made.a == 1
    m = Mutable(1)
    assert (m.x, m.y) == (1, 2) and not hasattr(m, "z")  # as dataclasses leaves it
    m.z = 3
    m.y = 4
    assert repr(m) == "Mutable(x=1, y=4, z=3)"


def test_declaring_a_record_on_the_wrong_base_is_refused() -> None:
    with pytest.raises(TypeError, match="must subclass Record"):
        record_dataclass(frozen=True)(Mutable)
    with pytest.raises(TypeError, match="must subclass MutableRecord"):
        record_dataclass(frozen=False)(Shared)


def test_signature_is_the_generated_init_s() -> None:
    import inspect

    def without_return(sig: inspect.Signature) -> str:
        return str(sig.replace(return_annotation=inspect.Signature.empty))

    assert without_return(inspect.signature(Shared)) == without_return(inspect.signature(Generated))
    assert str(inspect.signature(Shared)) == (
        "(a: 'int', b: 'str', c: 'Tuple[int, ...]' = (), d: 'List[int]' = <factory>, "
        "f: 'Dict[str, int]' = <factory>) -> None")
    assert list(inspect.signature(Mutable).parameters) == ["x", "y"]
