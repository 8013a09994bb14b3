"""The frame record is described once, by the core (register_engine.cpp's table, exported as
``_core.FRAME_RECORD_FIELDS``): Frame's fields begin with it, in its order and of its kinds;
the operator's metadata keys and the distributed app's record tensor are it
(tests/test_operators.py)."""

from __future__ import annotations

from dataclasses import fields
from typing import get_type_hints

import numpy as np
from frames_helpers import frames_config, one_frame, send, sensor_for

from roce_transceiver import _core
from roce_transceiver.frames import RECORD_FIELDS, RECORD_NAMES, Frame
from roce_transceiver.transceiver import Transceiver

KINDS = {"int": int, "bool": bool, "int?": int | None}


def test_frame_declares_the_cores_record_in_its_order_and_kinds() -> None:
    assert tuple(_core.FRAME_RECORD_FIELDS) == RECORD_FIELDS
    declared = [f.name for f in fields(Frame)]
    assert tuple(declared[: len(RECORD_NAMES)]) == RECORD_NAMES
    hints = get_type_hints(Frame)
    assert {name: hints[name] for name in RECORD_NAMES} == {
        name: KINDS[kind] for name, kind in RECORD_FIELDS
    }


def test_a_frame_from_the_engine_fills_every_field_of_the_record() -> None:
    t = Transceiver(frames_config("cpu"))
    sensor = sensor_for(t)
    sent = sensor.frame(0, bytes(range(256)) * 16)
    with t:
        send(t, sent.packets)
        f = one_frame(t)
        record = f.as_dict()
        assert set(RECORD_NAMES) <= set(record)
        assert isinstance(record["metadata_crc"], int) and record["has_metadata"] is True
        assert record["bytes"] == len(sent.content) and f.ok
        # On the host the frame lies in host memory: array() is data's view, owner or not.
        assert not f.on_device
        assert np.array_equal(f.array(owner=object()), f.data)
        f.release()
