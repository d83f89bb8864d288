"""The API server for real: ``meshctl server`` (uvicorn on loopback) over a SQLite store, called
over HTTP and by the CLI as a subprocess. One server for the module; each test submits the jobs
it needs."""

from __future__ import annotations

import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from meshctl.pools import health
from meshctl.server.identity import add_user, issue_token, revoke_tokens
from meshctl.state import (
    AuditEntry,
    JobRecord,
    JobState,
    NodeRecord,
    Role,
    SqliteStore,
    open_store,
)
from tests.conftest import closed_port, wait_until

pytestmark = pytest.mark.integration

MESHCTL = str(Path(sys.executable).with_name("meshctl"))
USERS = {
    # name: role, teams
    "ana": (Role.USER, ["vision"]),
    "cy": (Role.USER, ["vision"]),
    "dee": (Role.USER, ["search"]),
    "bo": (Role.TEAM_ADMIN, ["search", "vision"]),
    "root": (Role.PLATFORM_ADMIN, ["ops"]),
    "gone": (Role.PLATFORM_ADMIN, ["ops"]),
}


@dataclass
class Server:
    url: str
    home: Path
    tokens: dict[str, str]
    process: subprocess.Popen[bytes]

    def call(
        self, method: str, path: str, who: str | None = None, body: Any = None, raw: bytes = b""
    ) -> tuple[int, Any]:
        """The status and the JSON answer; ``who``: the user whose token goes with it."""
        data = raw or (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if who is not None:
            request.add_header("Authorization", f"Bearer {self.tokens.get(who, who)}")
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def submit(self, who: str, **spec: Any) -> str:
        status, said = self.call("POST", "/v1/jobs", who, {"job": job_document(**spec)})
        assert status == 201, said
        return str(said["id"])

    def store(self) -> SqliteStore:
        return SqliteStore(self.home / "state.db")

    def cli(
        self, *args: str, who: str | None = "ana", stdin: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """``meshctl ARGS`` as ``who`` (MESHCTL_SERVER and MESHCTL_TOKEN; None: neither), with
        a home of its own."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MESHCTL_")}
        environ["MESHCTL_HOME"] = str(self.home.parent / f"client-{who}")
        environ["MESHCTL_CACHE_DIR"] = os.environ["MESHCTL_CACHE_DIR"]
        if who is not None:
            environ |= {"MESHCTL_SERVER": self.url, "MESHCTL_TOKEN": self.tokens[who]}
        return subprocess.run(
            [MESHCTL, *args], env=environ | env, capture_output=True, text=True, timeout=120,
            cwd=self.home.parent, input=stdin,
        )  # fmt: skip


def job_document(name: str = "probe", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "meshctl/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"kind": "batch", "entrypoint": "python -c 'print(1)'", **spec},
    }


def start(
    home: Path, *flags: str, cafile: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``meshctl server FLAGS`` on a free port, up (``cafile``: it serves TLS signed by it)."""
    port = closed_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MESHCTL_")}
    environ |= {"MESHCTL_HOME": str(home), "MESHCTL_CACHE_DIR": os.environ["MESHCTL_CACHE_DIR"]}
    log = (home.parent / f"server-{port}.log").open("wb")
    process = subprocess.Popen(
        [MESHCTL, "server", "--port", str(port), *flags], env=environ, cwd=home.parent,
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"{'https' if cafile else 'http'}://127.0.0.1:{port}"
    tls = ssl.create_default_context(cafile=cafile) if cafile else None

    def up() -> bool:
        assert process.poll() is None, (home.parent / f"server-{port}.log").read_text()
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5, context=tls) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    wait_until(lambda: f"server not up: {(home.parent / f'server-{port}.log').read_text()}", up)
    return process, url


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("api") / "home"
    tokens = {}
    with open_store(home) as store:
        for name, (role, teams) in USERS.items():
            tokens[name] = add_user(store, name, teams, role, 1.0)[1]
        tokens["revoked"] = issue_token(store, "gone", 2.0)
        revoke_tokens(store, "gone", 3.0)
        store.create(NodeRecord("local/n1", "local", "ready", {}, {"GPU": 8}, 1.0))
    process, url = start(home, "--max-upload", "1")
    yield Server(url, home, tokens, process)
    stop(process)


def counts(server: Server) -> tuple[int, int]:
    with server.store() as store:
        return len(store.list(JobRecord)), len(store.audit())


# --- 401: no token, nothing written -------------------------------------------------------------

ROUTES = [
    ("GET", "/v1/whoami"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/x"),
    ("POST", "/v1/jobs/x/cancel"),
    ("GET", "/v1/jobs/x/logs"),
    ("GET", "/v1/jobs/x/explain"),
    ("GET", "/v1/status"),
    ("GET", "/v1/queues"),
    ("GET", "/v1/pools"),
    ("GET", "/v1/pools/onprem"),
    ("POST", "/v1/pools/check"),
    ("GET", "/v1/nodes"),
    ("GET", "/v1/nodes/local/n1"),
    ("POST", "/v1/nodes/local/n1/cordon"),
    ("POST", "/v1/nodes/local/n1/health"),
    ("GET", "/v1/audit"),
]
NO_TOKEN = [
    # id, token sent (None: no header)
    pytest.param(None, id="no-header"),
    pytest.param("mct_0123456789abcdef_" + "A" * 43, id="unknown"),
    pytest.param("revoked", id="revoked"),
    pytest.param("not a token", id="malformed"),
]


@pytest.mark.parametrize("token", NO_TOKEN)
def test_without_a_valid_token_every_route_is_401_and_nothing_is_written(
    server: Server, token: str | None
) -> None:
    before = counts(server)
    for method, path in ROUTES:
        body = {"job": job_document()} if method == "POST" else None
        status, said = server.call(method, path, token, body)
        assert status == 401, (method, path, said)
        assert said["error"]
    assert counts(server) == before


# --- roles on verbs -----------------------------------------------------------------------------


@pytest.fixture
def jobs(server: Server) -> dict[str, str]:
    """A fresh pending job of ana (vision), cy (vision) and dee (search)."""
    return {who: server.submit(who) for who in ("ana", "cy", "dee")}


ON_JOBS = [
    # who, verb, whose job, expected status
    ("ana", "show", "ana", 200),
    ("ana", "show", "cy", 403),
    ("ana", "show", "dee", 403),
    ("ana", "cancel", "cy", 403),
    ("ana", "cancel", "dee", 403),
    ("ana", "cancel", "ana", 200),
    ("dee", "cancel", "ana", 403),
    ("bo", "show", "cy", 200),
    ("bo", "cancel", "cy", 200),
    ("bo", "cancel", "dee", 200),
    ("root", "show", "dee", 200),
    ("root", "cancel", "ana", 200),
]


@pytest.mark.parametrize(("who", "verb", "whose", "expected"), ON_JOBS)
def test_each_role_on_the_jobs_it_does_and_does_not_reach(
    server: Server, jobs: dict[str, str], who: str, verb: str, whose: str, expected: int
) -> None:
    job_id = jobs[whose]
    path = f"/v1/jobs/{job_id}" + ("/cancel" if verb == "cancel" else "")
    status, said = server.call("POST" if verb == "cancel" else "GET", path, who)
    assert status == expected, said
    with server.store() as store:
        record = store.get(JobRecord, job_id)
        assert record is not None
        cancelled = record.state is JobState.CANCELLED
        last = store.audit()[-1]
    assert cancelled is (verb == "cancel" and expected == 200)
    if verb == "cancel" and who != whose:  # another's job: audited, allowed or refused
        assert (last.actor, last.action, last.target) == (who, "jobs.cancel", job_id)
        assert last.outcome == ("allowed" if expected == 200 else "denied")


def test_a_user_cannot_cancel_another_teams_job_by_name_either(
    server: Server, jobs: dict[str, str]
) -> None:
    status, said = server.call("POST", f"/v1/jobs/{jobs['dee'][:-3]}/cancel", "ana")
    assert status in (403, 404), said
    with server.store() as store:
        assert store.get(JobRecord, jobs["dee"]).state is JobState.PENDING  # type: ignore[union-attr]


def test_a_list_holds_the_jobs_each_role_reaches(server: Server, jobs: dict[str, str]) -> None:
    def listed(who: str) -> set[str]:
        status, rows = server.call("GET", "/v1/jobs", who)
        assert status == 200
        return {r["id"] for r in rows} & set(jobs.values())

    assert listed("ana") == {jobs["ana"]}
    assert listed("bo") == set(jobs.values())
    assert listed("root") == set(jobs.values())
    _, rows = server.call("GET", "/v1/jobs?team=search", "bo")
    assert {r["id"] for r in rows} & set(jobs.values()) == {jobs["dee"]}


def test_a_job_is_charged_to_the_users_team(server: Server) -> None:
    status, said = server.call("POST", "/v1/jobs", "bo", {"job": job_document(team="search")})
    assert status == 201, said
    with server.store() as store:
        record = store.get(JobRecord, said["id"])
    assert record is not None
    assert (record.team, record.owner) == ("search", "bo")


REFUSED_SUBMISSIONS = [
    # id, who, body (or raw bytes), status, the error says
    pytest.param("ana", {"job": job_document(team="search")}, 403,
                 "ana may charge jobs to vision, not 'search'", id="another-team"),
    pytest.param("bo", {"job": job_document()}, 422, "spec.team: bo is in search, vision; pick",
                 id="several-teams-none-picked"),
    pytest.param("ana", {}, 422, "job: Field required", id="no-job"),
    pytest.param("ana", {"jobx": {}}, 422, "jobx: Extra inputs", id="a-misspelt-job"),
    pytest.param("ana", {"job": job_document(), "extra": 1}, 422, "extra: Extra inputs",
                 id="unknown-field"),
    pytest.param("ana", {"job": {"spec": 3}}, 422, "job.spec: expected a mapping", id="bad-spec"),
    pytest.param("ana", {"job": job_document(team=["vision"])}, 422,
                 "job.spec.team: expected a team name", id="team-not-a-name"),
    pytest.param("ana", {"job": job_document(resources={"gpus": "lots"})}, 422,
                 "job.spec.resources.gpus: expected", id="bad-gpus"),
    pytest.param("ana", {"job": job_document(resources={"gpus": 10_000})}, 422,
                 "", id="can-never-run"),
    pytest.param("ana", b"{not json", 422, "Invalid JSON", id="not-json"),
    pytest.param("ana", {"job": job_document(), "working_dir": "@@"}, 422,
                 "working_dir: expected base64", id="bad-working-dir"),
    pytest.param("ana", {"job": job_document(), "working_dir": "A" * (2**20 + 8)}, 413,
                 "body: ", id="over-the-cap"),
]  # fmt: skip


@pytest.mark.parametrize(("who", "body", "status", "says"), REFUSED_SUBMISSIONS)
def test_a_refused_submission_says_why_and_writes_nothing(
    server: Server, who: str, body: Any, status: int, says: str
) -> None:
    before = counts(server)
    raw = body if isinstance(body, bytes) else b""
    got, said = server.call("POST", "/v1/jobs", who, None if raw else body, raw=raw)
    assert got == status, said
    assert says in said["error"]
    assert "\n" not in said["error"]
    assert counts(server) == before
    assert (
        not list((server.home / "uploads").glob("*"))
        if (server.home / "uploads").exists()
        else True
    )


READS = [
    # who, path, expected status
    (who, path, 403 if path == "/v1/audit" and who != "root" else 200)
    for who in ("ana", "bo", "root")
    for path in (
        "/v1/whoami",
        "/v1/status",
        "/v1/pools",
        "/v1/pools/onprem",
        "/v1/nodes",
        "/v1/jobs",
        "/v1/policies",
        "/v1/audit",
    )
]


@pytest.mark.parametrize(("who", "path", "expected"), READS)
def test_what_each_role_reads(server: Server, who: str, path: str, expected: int) -> None:
    before = counts(server)
    status, said = server.call("GET", path, who)
    assert status == expected, said
    assert counts(server) == before


def test_a_pool_is_shown_to_all_and_checked_by_platform_admins(server: Server) -> None:
    status, said = server.call("GET", "/v1/pools/onprem", "ana")
    assert status == 200, said
    assert (said["name"], said["prices"]) == ("onprem", [])
    status, said = server.call("GET", "/v1/pools/nope", "ana")
    assert (status, said["error"]) == (422, "pool: expected one of onprem, aws-burst, "
                                            "gcp-burst, got 'nope'")  # fmt: skip
    status, said = server.call("POST", "/v1/pools/check", "ana", {})
    assert (status, said["error"]) == (403, "pools.check: not allowed to a user")
    status, rows = server.call("POST", "/v1/pools/check", "root", {"pool": "onprem"})
    assert status == 200, rows
    ((row,),) = [rows]
    assert (row["pool"], row["available"]) == ("onprem", False)  # no Ray cluster is up
    assert [c["check"] for c in row["checks"]] == ["reachable"]
    status, said = server.call("POST", "/v1/pools/check", "root", {"pool": "nope"})
    assert (status, "pool 'nope': not in the mesh" in said["error"]) == (422, True)
    shown = server.cli("pools", "show", "onprem", "-o", "json")
    assert json.loads(shown.stdout)["name"] == "onprem", shown.stderr
    checked = server.cli("pools", "check", "onprem", who="root")
    assert checked.returncode == 1, checked.stderr
    assert "1 of 1 pools unavailable: onprem" in checked.stderr
    refused = server.cli("pools", "check")
    assert refused.returncode == 2
    assert refused.stderr == "error: pools.check: not allowed to a user\n"


# --- nodes and the audit log ------------------------------------------------------------------

NODE_ACTIONS = [
    # who, action, body, status, node state after
    ("ana", "cordon", None, 403, "ready"),
    ("bo", "cordon", None, 403, "ready"),
    ("root", "cordon", None, 200, "cordoned"),
    ("root", "drain", {"deadline": "soon"}, 422, "cordoned"),
    ("root", "drain", {"deadline": "5m"}, 200, "draining"),
    ("root", "uncordon", None, 200, "ready"),
    ("root", "reboot", None, 422, "ready"),
]


def test_nodes_are_managed_by_platform_admins_and_audited(server: Server) -> None:
    for who, action, body, status, after in NODE_ACTIONS:
        before = counts(server)[1]
        got, said = server.call("POST", f"/v1/nodes/local/n1/{action}", who, body)
        assert got == status, (who, action, said)
        with server.store() as store:
            node = store.get(NodeRecord, "local/n1")
            entries = store.audit(after_seq=0)[before:]
        assert node is not None
        assert node.state == after, (who, action)
        if status == 403:
            assert [(e.actor, e.outcome) for e in entries] == [(who, "denied")]
        elif status == 200:
            assert [(e.actor, e.action, e.outcome) for e in entries] == [
                (who, f"nodes.{action}", "allowed")
            ]
        else:
            assert entries == []


def test_the_policies_are_reloaded_by_platform_admins_only(server: Server) -> None:
    before = counts(server)[1]
    status, said = server.call("POST", "/v1/policies/reload", "bo")
    assert status == 403, said
    with server.store() as store:
        entry = store.audit()[-1]
    assert (entry.actor, entry.action, entry.outcome) == ("bo", "policies.reload", "denied")
    assert counts(server)[1] == before + 1
    status, said = server.call("POST", "/v1/policies/reload", "root", {"timeout_s": 2})
    assert status == 503, said  # allowed, but no controller runs beside this server
    assert said["error"] == "no controller is running (meshctl up starts one)"
    reloaded = server.cli("reload", who="root")
    assert reloaded.returncode == 1
    assert "no controller is running" in reloaded.stderr
    status, said = server.call("GET", "/v1/policies", "ana")
    assert status == 200
    assert said["enforced"] is None
    assert len(said["checked_against"]) >= 8


def test_the_mesh_is_brought_up_and_down_by_platform_admins_only(server: Server) -> None:
    status, said = server.call("POST", "/v1/mesh/down", "bo")
    assert status == 403, said
    with server.store() as store:
        assert store.audit()[-1].outcome == "denied"
    assert server.call("POST", "/v1/mesh/up", "root", {"interval": 0})[0] == 422
    down = server.cli("down", who="root")  # nothing is up on the server's host
    assert down.returncode == 0, down.stderr
    with server.store() as store:
        entry = store.audit()[-1]
    assert (entry.actor, entry.action, entry.outcome) == ("root", "mesh.down", "allowed")
    assert entry.detail == {"exit_code": 0}


def test_a_node_is_shown_to_all_and_its_health_set_by_platform_admins(server: Server) -> None:
    shown = server.cli("nodes", "show", "n1", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["node"] == "local/n1"
    refused = server.cli("nodes", "health", "n1", "--unhealthy", "GPU XID 79")
    assert refused.returncode == 2
    assert "nodes.manage: not allowed to a user" in refused.stderr
    status, said = server.call("POST", "/v1/nodes/local/n1/health", "root", {"unhealthy": ""})
    assert status == 422, said
    marked = server.cli("nodes", "health", "local/n1", "--unhealthy", "GPU XID 79", who="root")
    assert marked.returncode == 0, marked.stderr
    assert marked.stdout.strip() == "local/n1: unhealthy (GPU XID 79)"
    assert health.unhealthy(server.home) == {"local/n1": "GPU XID 79"}
    cleared = server.cli("nodes", "health", "local/n1", "--healthy", who="root")
    assert cleared.returncode == 0, cleared.stderr
    assert health.unhealthy(server.home) == {}
    with server.store() as store:
        actions = [(e.actor, e.action, e.outcome, e.detail.get("unhealthy")) for e in store.audit()]
    assert actions[-3:] == [
        ("ana", "nodes.manage", "denied", None),
        ("root", "nodes.health", "allowed", "GPU XID 79"),
        ("root", "nodes.health", "allowed", None),
    ]


def test_the_audit_log_is_read_by_platform_admins_and_meshctl_admin_audit(server: Server) -> None:
    assert server.call("GET", "/v1/audit", "bo")[0] == 403
    status, entries = server.call("GET", "/v1/audit?limit=2", "root")
    assert status == 200
    assert [e["action"] for e in entries] == ["users.add", "users.add"]
    assert server.call("GET", "/v1/audit?limit=0", "root")[0] == 422
    done = subprocess.run(
        [MESHCTL, "admin", "audit", "-o", "json"], capture_output=True, text=True,
        env={**os.environ, "MESHCTL_HOME": str(server.home)}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said[0]["action"] == "users.add"
    assert all(set(AuditEntry.__dataclass_fields__) <= set(e) for e in said)


def test_metrics_are_served_without_a_token(server: Server) -> None:
    server.submit("ana")
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as answer:
        text = answer.read().decode()
    assert "meshctl_pending_workloads{" in text


# --- the CLI as a client ----------------------------------------------------------------------


def test_the_cli_submits_lists_shows_and_cancels_through_the_server(
    server: Server, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (work / "main.py").write_text("print('hello')\n")
    (work / ".git" / "config").write_text("x")
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: from-cli}\n"
        "spec:\n  kind: batch\n  entrypoint: python main.py\n  working_dir: work\n"
    )
    done = server.cli("submit", str(job_file))
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    with server.store() as store:
        record = store.get(JobRecord, job_id)
    assert record is not None
    assert (record.owner, record.team) == ("ana", "vision")
    package = Path(record.spec["spec"]["working_dir"])
    assert package.parent == server.home / "packages"
    assert sorted(p.name for p in package.iterdir()) == [".meshctl-job", "main.py"]  # no .git
    listed = server.cli("jobs", "list", "-o", "json")
    assert job_id in {r["id"] for r in json.loads(listed.stdout)}, listed.stderr
    shown = server.cli("jobs", "show", job_id, "-o", "json")
    assert json.loads(shown.stdout)["id"] == job_id, shown.stderr
    refused = server.cli("jobs", "cancel", job_id, who="dee")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: "), refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    cancelled = server.cli("jobs", "cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{job_id} cancelled (was pending)"


def test_the_cli_waits_reads_logs_explains_and_lists_pools_through_the_server(
    server: Server,
) -> None:
    job_id = server.submit("ana")
    waited = server.cli("jobs", "wait", job_id, "--timeout", "1s")
    assert waited.returncode == 124, waited.stderr  # no controller: it stays pending
    assert f"{job_id} pending" in waited.stdout
    logs = server.cli("jobs", "logs", job_id)
    assert logs.returncode == 0, logs.stderr
    assert "has not started: it is queued (pending)" in logs.stderr
    explained = server.cli("explain", job_id, "-o", "json")
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["state"] == "pending"
    pools = server.cli("pools", "list", "-o", "json")
    assert pools.returncode == 0, pools.stderr
    assert "onprem" in {r["pool"] for r in json.loads(pools.stdout)}
    with server.store() as store:  # the job ends (as the controller would end it)
        record = store.get(JobRecord, job_id)
        assert record is not None
        store.update(replace(record, state=JobState.CANCELLED), expected_version=record.version)
    followed = server.cli("jobs", "logs", "--follow", job_id)
    assert followed.returncode == 0, followed.stderr  # nothing ran: nothing printed, it ends
    assert followed.stdout == ""
    other = server.cli("explain", job_id, who="dee")
    assert other.returncode == 2
    assert "may not see it" in other.stderr


def test_the_cli_trains_through_the_server_and_follows_the_job(
    server: Server, tmp_path: Path
) -> None:
    work = tmp_path / "loop"
    work.mkdir()
    (work / "model.py").write_text("def train_loop(config):\n    pass\n")
    done = server.cli("train", "model:train_loop", "--working-dir", str(work), "--timeout", "2s")
    assert done.returncode == 124, done.stderr  # no controller: it stays pending
    job_id, *lines = done.stdout.splitlines()
    assert any(line.endswith("job.pending: submitted") for line in lines), done.stdout
    assert f"{job_id} still pending after 2 s" in done.stderr
    with server.store() as store:
        record = store.get(JobRecord, job_id)
    assert record is not None
    assert (record.owner, record.team) == ("ana", "vision")  # the user's team, not "default"
    assert record.spec["spec"]["train"]["loop"] == "model:train_loop"
    broken = server.cli("train", "model:nope", "--working-dir", str(work), "--no-follow")
    assert broken.returncode == 2, broken.stderr
    assert "train.loop" in broken.stderr
    assert broken.stderr.count("\n") == 1


CLI_REFUSALS = [
    # id, args, who, extra environment, the one line it says
    pytest.param(("submit", "--team", "search", "--", "python", "x.py"), "ana", {},
                 "error: spec.team: ana may charge jobs to vision, not 'search'",
                 id="another-team"),
    pytest.param(("gc", "--dry-run"), "ana", {}, "not served by the API server yet",
                 id="a-command-not-served"),
    pytest.param(("jobs", "list"), "ana", {"MESHCTL_TOKEN": "mct_bad"}, "token is not valid",
                 id="bad-token"),
    pytest.param(("jobs", "list"), "ana", {"MESHCTL_SERVER": "ftp://x"},
                 "MESHCTL_SERVER: expected http(s)://HOST:PORT", id="bad-url"),
    pytest.param(("nodes", "cordon", "n1"), "ana", {}, "nodes.manage: not allowed to a user",
                 id="user-cordons"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "who", "env", "says"), CLI_REFUSALS)
def test_the_cli_refused_by_the_server_exits_2_with_one_line(
    server: Server, args: tuple[str, ...], who: str, env: dict[str, str], says: str
) -> None:
    done = server.cli(*args, who=who, **env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_login_keeps_the_server_and_token_private_and_logout_forgets_them(server: Server) -> None:
    client = server.home.parent / "client-None"
    bad = server.cli("login", server.url, "--token", "mct_nope", who=None)
    assert bad.returncode == 2
    assert not (client / "credentials.json").exists()
    done = server.cli("login", server.url, who=None, stdin=server.tokens["cy"] + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"logged in to {server.url} as cy (user; vision)"
    assert stat.S_IMODE((client / "credentials.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(client.stat().st_mode) == 0o700
    status = server.cli("status", "-o", "json", who=None)
    assert status.returncode == 1, status.stderr  # no controller beside this server
    assert "no controller is running" in status.stderr
    assert "pools" in json.loads(status.stdout)
    assert server.cli("logout", who=None).stdout.strip() == "logged out"
    assert not (client / "credentials.json").exists()


def test_queues_through_the_server_print_what_they_print_on_its_home(server: Server) -> None:
    """The same document (and table) from the API server as from its own home, read here."""
    remote = server.cli("queues", "-o", "json", who="ana")
    assert remote.returncode == 0, remote.stderr
    here = server.cli("queues", "-o", "json", who=None, MESHCTL_HOME=str(server.home))
    assert here.returncode == 0, here.stderr
    assert json.loads(remote.stdout) == json.loads(here.stdout)
    assert json.loads(remote.stdout)["cohorts"][0]["cohort"] == "research"
    table = server.cli("queues", who="ana")
    assert table.stdout == server.cli("queues", who=None, MESHCTL_HOME=str(server.home)).stdout


def test_the_servers_files_are_private(server: Server) -> None:
    assert stat.S_IMODE(server.home.stat().st_mode) == 0o700
    for name in ("state.db", "state.db-wal"):
        assert stat.S_IMODE((server.home / name).stat().st_mode) == 0o600, name


# --- starting the server ----------------------------------------------------------------------

START_REFUSALS = [
    # id, flags, the one line it says
    pytest.param(("--host", "0.0.0.0"), "--host: 0.0.0.0 is not a loopback address", id="no-tls"),
    pytest.param(("--tls-cert", "/nope"), "--tls-cert, --tls-key: give both", id="half-tls"),
    pytest.param(("--host", "0.0.0.0", "--tls-cert", "/nope", "--tls-key", "/nope"),
                 "--tls-cert: no such file /nope", id="missing-cert"),
    pytest.param(("--max-upload", "0"), "--max-upload: expected at least 1", id="no-upload"),
    pytest.param(("--store", "mysql://x"), "--store: expected", id="unknown-store"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "says"), START_REFUSALS)
def test_a_server_that_cannot_be_served_safely_does_not_start(
    tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    done = subprocess.run(
        [MESHCTL, "server", *flags], capture_output=True, text=True, timeout=60,
        env={**os.environ, "MESHCTL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {says}"), done.stderr
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "home" / "state.db").exists()


def test_a_server_with_tls_is_reached_with_its_certificate_authority(
    server: Server, tmp_path: Path
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    process, https = start(server.home, "--tls-cert", str(cert), "--tls-key", str(key), cafile=cert)
    try:
        plain = server.cli("jobs", "list", MESHCTL_SERVER=https)
        assert plain.returncode == 1
        assert "CERTIFICATE_VERIFY_FAILED" in plain.stderr
        trusted = server.cli("jobs", "list", "-o", "json", MESHCTL_SERVER=https,
                             MESHCTL_CA_FILE=str(cert))  # fmt: skip
        assert trusted.returncode == 0, trusted.stderr
    finally:
        stop(process)


# --- one view: a command prints the same in local and server mode -------------------------------

SAME_IN_BOTH_MODES = [
    # id, argv (JOB: the job submitted for the test)
    pytest.param(["jobs", "show", "JOB"], id="jobs-show"),
    pytest.param(["explain", "JOB"], id="explain"),
    pytest.param(["pools", "list"], id="pools-list"),
    pytest.param(["pools", "show", "onprem"], id="pools-show"),
    pytest.param(["nodes", "list"], id="nodes-list"),
    pytest.param(["nodes", "show", "local/n1"], id="nodes-show"),
]


@pytest.fixture(scope="module")
def decided(server: Server) -> str:
    """A job with a scheduling decision recorded for it, as the controller records one."""
    from meshctl.state import Decision

    job_id = server.submit("ana", name="both-modes")
    said = {
        "status": "pending",
        "summary": "pending: 1 node; 1 lacks 8 GPUs free",
        "nodes_considered": 1,
        "filtered": {"lacks 8 GPUs free": 1},
        "candidates": [{"nodes": ["n1"], "total": 0.5556, "scores": {"binpack": 0.5556}}],
    }
    with server.store() as store:
        store.record_decisions([Decision(1.0, job_id, "pending", "abc123", said)])
    return job_id


@pytest.mark.parametrize("argv", SAME_IN_BOTH_MODES)
def test_a_command_prints_the_same_in_local_and_server_mode(
    server: Server, decided: str, argv: list[str]
) -> None:
    args = [decided if a == "JOB" else a for a in argv]
    local = server.cli(*args, who=None, MESHCTL_HOME=str(server.home))
    remote = server.cli(*args, who="root")
    assert local.returncode == 0, local.stderr
    assert (remote.returncode, remote.stderr) == (0, local.stderr)
    assert remote.stdout == local.stdout
    assert remote.stdout.strip()
