"""A job's datasets checked at submit: listed at their sources (real folders; S3 at a closed
port and at one that accepts and never answers), refused when missing, unreachable or larger
than every node cache of the mesh, with the file, line and field; nothing queued then."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.data.check import TIMEOUT_S, Outcome, Seen, checkable, look, problems
from meshctl.files import load_text
from meshctl.model import Mesh
from meshctl.model.job import Dataset
from tests.conftest import closed_port

pytestmark = pytest.mark.unit

KIB = 1024
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: tiny}}
spec:
  pools:
    - name: onprem
      provider: local
      nodes:
        - {{name: gpu, gpus: 1, cpus: 1, memory_gib: 2GiB, cache_gib: {cache},
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""
JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: reader}}
spec:
  kind: batch
  entrypoint: python read.py
  resources: {{gpus: 1, cpus: 250m, memory_gib: 256MiB}}
  data:
    - name: corpus
      location: "{location}"
{extra}"""
LOCATION_LINE = 10  # of JOB: spec.data[0].location
SIZE_LINE = 11  # the first extra line, where a test gives size_gib


def job_text(location: str, *extra: str) -> str:
    return JOB.format(location=location, extra="".join(f"      {e}\n" for e in extra))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a tiny mesh (one node, a 0.001 GiB cache: 1,073,742 bytes), a dataset
    that fits it, one that does not, and an empty one; the state home under it."""
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MESHCTL_PROVIDERS", raising=False)
    (tmp_path / "mesh.yaml").write_text(MESH.format(cache=0.001))
    (tmp_path / "none.yaml").write_text(MESH.format(cache=0))
    for name, size in (
        ("small/a.bin", 100 * KIB),
        ("big/a.bin", 1024 * KIB),
        ("big/b.bin", 1024 * KIB),
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "empty").mkdir()
    return tmp_path


def submit(world: Path, text: str, *flags: str, mesh: str = "mesh.yaml") -> tuple[int, str]:
    """``meshctl submit`` of a job file with ``text``: its exit code and stderr; a refusal
    must have queued nothing."""
    job = world / "job.yaml"
    job.write_text(text)
    before = queued()
    result = CliRunner().invoke(app, ["--mesh", str(world / mesh), "submit", str(job), *flags])
    if result.exit_code != 0:
        assert queued() == before, "a refused job was queued"
    return result.exit_code, result.stderr


def queued() -> int:
    return len(json.loads(CliRunner().invoke(app, ["jobs", "list", "-o", "json"]).stdout))


REFUSED = [
    (
        "a folder that is not there",
        "{world}/missing",
        (),
        f"{LOCATION_LINE}: spec.data[0].location: expected files at {{world}}/missing, got "
        "nothing there",
    ),
    (
        "an empty folder",
        "{world}/empty",
        (),
        f"{LOCATION_LINE}: spec.data[0].location: expected files at {{world}}/empty, got a "
        "folder with no files",
    ),
    (
        # 2 MiB = 0.00195 GiB listed; the size_gib it gives is not what counts
        "a folder larger than every node cache",
        "{world}/big",
        ("size_gib: 1KiB",),
        f"{LOCATION_LINE}: spec.data[0].location: expected at most 0.001 GiB, the largest node "
        "cache (pool onprem, node group gpu), got 0.00195 GiB listed at {world}/big",
    ),
    (
        "a size_gib larger than every node cache, not listed (not a source the caches read)",
        "onprem:/data/corpus",
        ("size_gib: 2TiB",),
        f"{SIZE_LINE}: spec.data[0].size_gib: expected at most 0.001 GiB, the largest node "
        "cache (pool onprem, node group gpu), got 2048 GiB",
    ),
]


@pytest.mark.parametrize(
    ("location", "extra", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_job_whose_data_cannot_be_cached_is_refused_with_its_line(
    world: Path, location: str, extra: tuple[str, ...], message: str
) -> None:
    code, err = submit(world, job_text(location.format(world=world), *extra))
    assert code == 2, err
    assert err == f"error: {world}/job.yaml:{message.format(world=world)}\n"


ACCEPTED = [
    ("a folder that fits", "{world}/small", (), "mesh.yaml"),
    ("one file that fits", "{world}/small/a.bin", (), "mesh.yaml"),
    ("a location the caches do not read: not listed", "onprem:/data/corpus", (), "mesh.yaml"),
    ("a mesh without caches sets no size limit", "{world}/big", ("size_gib: 2TiB",), "none.yaml"),
    ("file:// as a folder", "file://{world}/small", (), "mesh.yaml"),
]


@pytest.mark.parametrize(
    ("location", "extra", "mesh"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED]
)
def test_a_job_whose_data_is_there_and_fits_is_queued(
    world: Path, location: str, extra: tuple[str, ...], mesh: str
) -> None:
    code, err = submit(world, job_text(location.format(world=world), *extra), mesh=mesh)
    assert code == 0, err


def test_no_data_check_lists_nothing_but_still_checks_a_size_given(world: Path) -> None:
    assert submit(world, job_text(f"{world}/missing"), "--no-data-check")[0] == 0
    code, err = submit(world, job_text(f"{world}/missing", "size_gib: 1GiB"), "--no-data-check")
    assert code == 2
    assert f"job.yaml:{SIZE_LINE}: spec.data[0].size_gib: expected at most 0.001 GiB" in err
    assert "--no-data-check" in CliRunner().invoke(app, ["submit", "--help"]).stdout


def test_an_s3_endpoint_that_refuses_connections_is_unreachable_at_once(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    code, err = submit(world, job_text("s3://corpus/v1", f"endpoint_url: {endpoint}"))
    took = time.monotonic() - started
    assert code == 0, err  # queued: a warning, as the nodes may reach what this machine cannot
    assert err.startswith(
        f"warning: {world}/job.yaml:{LOCATION_LINE}: spec.data[0].location: s3://corpus/v1 could "
        "not be reached from here: "
    )
    first = err.splitlines()[0]  # then: queued, though no controller runs here
    assert first.endswith("--no-data-check skips this listing)")
    assert took < TIMEOUT_S + 5, took


def test_s3_without_an_endpoint_or_credentials_answers_within_the_deadline(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an example job (s3://corpus/...) meets on a laptop: no credentials, maybe no
    network. Whatever AWS says (or nothing at all), it is one line, in time: a warning if it
    could not be reached, an error if AWS answered that nothing is there."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(world / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(world / "no-config"))
    started = time.monotonic()
    _, err = submit(world, job_text("s3://corpus/web-v3"))
    assert f"job.yaml:{LOCATION_LINE}: spec.data[0].location: " in err.splitlines()[0]
    assert time.monotonic() - started < TIMEOUT_S + 10


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An S3 endpoint that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_a_source_that_never_answers_is_given_up_at_the_deadline(
    silent_endpoint: str, tmp_path: Path
) -> None:
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    datasets = [
        Dataset(name="quiet", location="s3://corpus/v1", endpoint_url=silent_endpoint),
        Dataset(name="here", location=str(tmp_path)),
    ]
    started = time.monotonic()
    seen = look(datasets, timeout_s=1.0)
    assert time.monotonic() - started < 10  # the child ended at its deadline, not the SDK's
    assert seen == [
        Seen(Outcome.UNREACHABLE, why="no answer within 1 s"),
        Seen(Outcome.FOUND, 10),
    ]


def test_validate_checks_a_size_given_against_the_caches(world: Path) -> None:
    job = world / "job.yaml"
    job.write_text(job_text("s3://corpus/v1", "size_gib: 3GiB"))
    result = CliRunner().invoke(app, ["validate", str(world / "mesh.yaml"), str(job)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {job}:{SIZE_LINE}: spec.data[0].size_gib: expected at most 0.001 GiB, the "
        "largest node cache (pool onprem, node group gpu), got 3 GiB\n"
    )


# --- the rule, from what the sources said -------------------------------------------------


def _mesh(cache_gib: float) -> Mesh:
    (loaded,) = load_text(MESH.format(cache=cache_gib))
    assert isinstance(loaded.document, Mesh)
    return loaded.document


GIB = 1024**3
RULE = [
    # (name, seen, size_gib given, cache GiB, errors, warnings)
    ("listed, fits: 1 GiB in 2", Seen(Outcome.FOUND, GIB), None, 2, [], []),
    ("listed, fits exactly: 2 GiB in 2", Seen(Outcome.FOUND, 2 * GIB), None, 2, [], []),
    ("listed, too big: 3 GiB in 2", Seen(Outcome.FOUND, 3 * GIB), None, 2, ["location"], []),
    ("listed beats given: 1 GiB listed, 5 given", Seen(Outcome.FOUND, GIB), "5GiB", 2, [], []),
    ("not listed, given 5 GiB in 2", None, "5GiB", 2, ["size_gib"], []),
    ("not listed, no size: nothing to check", None, None, 2, [], []),
    ("no caches: no limit", Seen(Outcome.FOUND, 9 * GIB), None, 0, [], []),
    (
        "missing: no size check",
        Seen(Outcome.MISSING, why="nothing there"),
        "5GiB",
        2,
        ["location"],
        [],
    ),
    # unreachable from here: said, not refused (the nodes may reach it); a size given checked
    ("unreachable", Seen(Outcome.UNREACHABLE, why="x"), None, 2, [], ["location"]),
    (
        "unreachable, too big as given",
        Seen(Outcome.UNREACHABLE, why="x"),
        "5GiB",
        2,
        ["size_gib"],
        ["location"],
    ),
    # still listing at the deadline: said, not refused; the size it gives checked instead
    ("slow, fits", Seen(Outcome.SLOW, why="x"), "1GiB", 2, [], ["location"]),
    ("slow, too big as given", Seen(Outcome.SLOW, why="x"), "5GiB", 2, ["size_gib"], ["location"]),
]


@pytest.mark.parametrize(
    ("seen", "size", "cache_gib", "errors", "warnings"),
    [c[1:] for c in RULE],
    ids=[c[0] for c in RULE],
)
def test_the_rule(
    seen: Seen | None, size: str | None, cache_gib: float, errors: list[str], warnings: list[str]
) -> None:
    (loaded,) = load_text(job_text("s3://corpus/v1", *([f"size_gib: {size}"] if size else [])))
    found = problems(loaded, _mesh(cache_gib), {0: seen} if seen else {})
    assert [[p.field for p in kept] for kept in found] == [
        [f"spec.data[0].{f}" for f in errors],
        [f"spec.data[0].{f}" for f in warnings],
    ]


def test_a_location_no_cache_reads_is_a_warning_naming_its_line(world: Path) -> None:
    code, err = submit(world, job_text("onprem:/data/corpus"))
    assert code == 0, err
    assert err.splitlines()[0] == (
        f"warning: {world}/job.yaml:{LOCATION_LINE}: spec.data[0].location: onprem:/data/corpus "
        "is not a location the node caches read (an absolute folder, file://, s3:// or gs://): "
        "the job reads it itself"
    )


@pytest.mark.parametrize(
    ("location", "listed"),
    [
        ("/shared/corpus", True),
        ("file:///shared/corpus", True),
        ("s3://corpus/v3", True),
        ("gs://corpus/v3", True),
        ("onprem:/data/tickets", False),
        ("relative/folder", False),
        ("hdfs://namenode/corpus", False),
        ("https://example.com/corpus.tar", False),
    ],
)
def test_which_locations_are_listed(location: str, listed: bool) -> None:
    assert checkable(location) is listed
