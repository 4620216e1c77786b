"""A prompt's JSON is written byte for byte as `json.dumps(..., indent=1)` writes it: the token
counts of a context and the prompts sent must not move with how fast they are written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hltm.llm.registry import payload_json

PAYLOADS: list[Any] = [
    {},
    [],
    "plain",
    None,
    {"question": "Wo?", "pairs": [], "scope": {"level": "seat", "node_id": "seat:c01-s02"}},
    {
        "facets": [{"node_id": "p:1", "field": "salary", "value": "€85 000", "support": 2}],
        "qa": [{"question": 'Wer?\n"Ö"', "score": 0.8125, "nested": [1, [2.5, None, True]]}],
        "empty": {"list": [], "object": {}},
        "tuple": (1, ("a", "b")),
        "nan": float("nan"),
    },
    {"b": 1, "a": {2: "int key", "z": [{"y": 1, "x": 2}]}},
]


@pytest.mark.parametrize("sort_keys", [False, True])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_is_written_exactly_as_json_writes_it(payload: Any, sort_keys: bool) -> None:
    try:
        expected = json.dumps(payload, ensure_ascii=False, indent=1, sort_keys=sort_keys)
    except TypeError:
        with pytest.raises(TypeError):
            payload_json(payload, sort_keys=sort_keys)
        return
    assert payload_json(payload, sort_keys=sort_keys) == expected
