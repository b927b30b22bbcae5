"""Hypothesis' example database, one option away for a team (SPEC §10, issue #16).

A directory database: a failure ``fuzz`` finds is replayed first by the next ``check`` — that is
``tests/test_cli.py::test_fuzz_saves_its_finding_and_the_next_check_replays_it_first`` (not repeated
here). Shared: ``--database redis://HOST:PORT/DB`` (needs ``gdn-equiv[redis]``), tested here against a
real ``redis-server`` this test starts on a free port. Under pytest, Hypothesis' own settings do it::

    from hypothesis import settings
    from hypothesis.extra.redis import RedisExampleDatabase
    import redis
    settings.register_profile("team", database=RedisExampleDatabase(redis.Redis(host=..., port=...)))
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gdn_equiv
from gdn_equiv.run import cli
from gdn_equiv.run.cli import common as cli_common

NO_BIAS = textwrap.dedent(
    '''
    from gdn_equiv.model.backends import get_backend

    _torch = get_backend("torch").forward


    def no_bias(x, weight, bias, activation, initial_state, output_final_state, cu_seqlens):
        """A correct depthwise causal conv that drops the bias."""
        return _torch(x, weight, None, activation, initial_state, output_final_state, cu_seqlens)
    '''
)
P7 = ["--property", "P7-backend-vs-torch", "--backend", "db_kernels:no_bias", "--no-isolate", "--device", "cpu"]
TINY = ["--profile", "dev", "--max-seq-len", "4", "--dtype", "float32", "--skip-necessity"]


def _gdn(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "db_kernels.py").write_text(NO_BIAS)
    env = dict(os.environ)
    here = str(Path(gdn_equiv.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), here, env.get("PYTHONPATH")) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    return subprocess.run(
        [sys.executable, "-m", "gdn_equiv", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_finding_in_a_redis_database_is_replayed_first_by_the_next_check(tmp_path, redis_url) -> None:
    """One example of a fresh check cannot see the dropped bias (the simplest example has none);
    with the fuzz run's finding in the shared database, it does, without a local directory database."""
    done = _gdn(tmp_path, "check", *P7, *TINY, "--examples", "1", "--database", redis_url)
    assert done.returncode == cli_common.EXIT_OK, done.stdout + done.stderr  # the control

    done = _gdn(tmp_path, "fuzz", *P7, *TINY, "--examples", "10", "--seconds", "30", "--database", redis_url)
    assert done.returncode == cli_common.EXIT_FAILED, done.stdout + done.stderr
    assert not (tmp_path / ".hypothesis" / "examples").exists()  # the finding went to redis only

    done = _gdn(tmp_path, "check", *P7, *TINY, "--examples", "1", "--database", redis_url)
    assert done.returncode == cli_common.EXIT_FAILED, done.stdout + done.stderr
    assert "FAIL P7-backend-vs-torch[db_kernels:no_bias-float32]" in done.stdout


def test_an_unreachable_redis_database_is_refused_before_any_example(capsys, free_port) -> None:
    pytest.importorskip("redis", reason="needs the redis package (pip install gdn-equiv[redis])")
    status = cli.main(["check", "--device", "cpu", "--database", f"redis://127.0.0.1:{free_port}/0"])
    assert status == cli_common.EXIT_ENVIRONMENT
    assert "cannot reach the server" in capsys.readouterr().err
