"""Coverage-guided fuzzing of the C++ decoder under AddressSanitizer and UBSan.

Goal: `rt::decode` never reads outside its input, never hits undefined
behaviour, and whatever it accepts re-encodes and decodes again. Python-level
fuzzing cannot see a one-byte over-read; this can. Oracle: ASan/UBSan and the
harness's own checks (roce_transceiver/core/fuzz/fuzz_decode.cpp). Seeds are
valid frames of every opcode, so mutations start deep inside the parser.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import skip_missing

from roce_transceiver import protocol

CORE = Path(__file__).resolve().parents[1] / "roce_transceiver" / "core"
FUZZ_SECONDS = 15


def _seed_frames() -> list[bytes]:
    seeds = []
    for i, name in enumerate(sorted(protocol.OPCODES)):
        row = protocol.opcode_row(name)
        payload = bytes(16) if name == "CNP" else bytes(range(i % 7)) if row.payload else b""
        v6 = i % 2 == 1
        seeds.append(
            protocol.build(
                name,
                payload,
                ip_src="fd00::1" if v6 else "10.0.0.1",
                ip_dst="fd00::2" if v6 else "10.0.0.2",
                vlan=7 if i % 3 == 0 else None,
            )
        )
    return seeds


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clang = shutil.which("clang++")
    if clang is None:
        skip_missing(
            "clang", "clang++ not found on PATH (apt-get install clang): libFuzzer needs it"
        )
    out = tmp_path_factory.mktemp("fuzz") / "fuzz_decode"
    cmd = [
        clang,
        "-std=c++17",
        "-O1",
        "-g",
        "-fsanitize=fuzzer,address,undefined",
        "-fno-sanitize-recover=all",
        f"-I{CORE / 'include'}",
        str(CORE / "fuzz" / "fuzz_decode.cpp"),
        str(CORE / "src" / "describe.cpp"),
        str(CORE / "src" / "crc32_host.cpp"),
        "-o",
        str(out),
    ]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def test_cpp_decoder_survives_libfuzzer_with_sanitizers(fuzzer: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, frame in enumerate(_seed_frames()):
        (corpus / f"seed{i:03d}").write_bytes(frame)
    run = subprocess.run(
        [
            str(fuzzer),
            str(corpus),
            f"-max_total_time={FUZZ_SECONDS}",
            "-max_len=9100",
            "-rss_limit_mb=2048",
            "-seed=1",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        timeout=FUZZ_SECONDS + 120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    assert "stat::number_of_executed_units" in run.stderr
