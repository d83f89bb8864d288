"""A job's folder on a cluster on this machine is read where it is (``local://``), not
uploaded: every node there shares the head's session folder, and each node's runtime-env
agent unpacked an upload into it afresh, deleting the folder the job's processes on other
nodes ran in (the integration test: ``test_a_job_s_folder_outlives_its_tasks_on_the_other_
nodes``). A cluster elsewhere gets the folder uploaded, as Ray's job SDK does."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from meshctl.pools.observed import ObservedJob, Submission
from meshctl.pools.ray import RayPoolClient

pytestmark = pytest.mark.unit


@dataclass
class Jobs:
    """Ray's job SDK, as the client calls it: what it was asked to submit."""

    sent: list[dict[str, Any]] = field(default_factory=list)

    def submit_job(self, **kwargs: Any) -> str:
        self.sent.append(kwargs)
        return str(kwargs["submission_id"])


@dataclass(frozen=True, slots=True)
class Client(RayPoolClient):
    jobs: Jobs = field(default_factory=Jobs)

    def _client(self) -> Any:
        return self.jobs

    def job(self, submission_id: str) -> ObservedJob | None:
        return None  # Ray knows no such job yet


def submission(folder: str) -> Submission:
    env = {"working_dir": folder, "env_vars": {"A": "1"}}
    return Submission("meshctl-j-1", "python run.py", env, {}, {})


@pytest.mark.parametrize(
    ("log_root", "given", "sent"),
    [
        ("/tmp/meshctl-ray-x", "{folder}", "local://{folder}"),  # a cluster on this machine
        (None, "{folder}", "{folder}"),  # elsewhere: the SDK uploads it
        ("", "{folder}", "{folder}"),  # a cloud head's cluster: no temp folder here
        ("/tmp/meshctl-ray-x", "gcs://_ray_pkg_1.zip", "gcs://_ray_pkg_1.zip"),  # a URI
        ("/tmp/meshctl-ray-x", "{folder}/absent", "{folder}/absent"),  # not a folder here
    ],
    ids=["on this machine", "elsewhere", "a real cloud head", "a uri", "no such folder"],
)
def test_a_job_s_folder_is_read_in_place_on_a_cluster_on_this_machine(
    tmp_path: Path, log_root: str | None, given: str, sent: str
) -> None:
    client = Client("lab", "http://127.0.0.1:1", "token", log_root=log_root)
    assert client.submit(submission(given.format(folder=tmp_path))) == "submitted"
    [call] = client.jobs.sent
    assert call["runtime_env"] == {"working_dir": sent.format(folder=tmp_path),
                                   "env_vars": {"A": "1"}}  # fmt: skip
