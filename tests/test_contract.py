"""The request/result contract is defined once (patchkit/engine/contract.py): both ends, the
CLI and the fleet take its names instead of keeping copies that could drift apart."""

from __future__ import annotations

from patchkit import request_builder
from patchkit.engine import contract, request as engine_request
from patchkit.engine.contract import reversed_record


def test_both_ends_speak_the_contracts_format_and_ops() -> None:
    assert engine_request.FORMAT is contract.FORMAT and request_builder.FORMAT is contract.FORMAT
    assert engine_request.OPS is contract.OPS is request_builder.OPS


def test_plan_offers_exactly_the_contracts_ops() -> None:
    from patchkit.cli.fleet import plan

    op = next(p for p in plan.params if p.name == "op")
    assert tuple(op.type.choices) == contract.OPS  # type: ignore[attr-defined]


def test_every_changing_outcome_is_an_outcome_and_unhealthy_states_are_states() -> None:
    for names in (*contract.CHANGED.values(), *contract.WOULD_CHANGE.values()):
        assert set(names) <= set(contract.OUTCOMES)
    assert contract.UNHEALTHY <= set(contract.STATES) and set(contract.RECORDED) <= set(contract.STATES)


def test_a_file_record_reversed_twice_is_itself() -> None:
    rec = {"root": "sglang", "path": "a.py", "patch": "0001-x.patch", "op": "create", "mode": None,
           "hunks": [{"body": " keep\n-old\n+new\n+more", "old_start": 1, "old_count": 2,
                      "new_start": 1, "new_count": 3}]}
    undone = reversed_record(rec)
    assert undone["op"] == "delete" and undone["hunks"][0]["body"] == " keep\n+old\n-new\n-more"
    assert (undone["hunks"][0]["old_count"], undone["hunks"][0]["new_count"]) == (3, 2)
    assert reversed_record(undone) == rec
