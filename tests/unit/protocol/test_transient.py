"""Which initialisation failures are retried (passing backend and network errors) and which are final."""

from __future__ import annotations

import grpc
import pytest

from pko.protocol import transient

UNKNOWN = grpc.StatusCode.UNKNOWN

PASSING = [
    # the two seen when 200 Stacks shared one file backend and each workspace start listed it
    "could not list stacks: error: list bucket: blob (code=NotFound): lstat /state/.pulumi/stacks/scale/"
    "s0071.json.bak.1764.tmp: no such file or directory",
    "could not list stacks: error: EOF",
    "failed to select stack: error: read tcp 10.0.0.4:51234->10.0.0.9:9000: read: connection reset by peer",
    "failed to select stack: error: Get \"https://minio.example:9000/state\": dial tcp: i/o timeout",
    "failed to select stack: error: blob (code=Unavailable): SlowDown: Please reduce your request rate.",
    "failed to select stack: error: [503] Service Unavailable",
    "failed to install project dependencies: error: failed to download plugin: random-4.19.1: 502 Bad Gateway: "
    "HTTP 502",
    "failed to set config: error: context deadline exceeded",
    "failed to select stack: error: net/http: TLS handshake timeout",
    # a kept `up` still holds the workspace (pko.agent.kept): it ends on its own
    "an up (operation 6f1c0e3a-0b7e-4d7e-9a53-0c4b1f3f2a11, started 2026-12-01T21:30:00+00:00) is still running in "
    "this workspace",
]

FINAL = [
    "failed to select stack: error: constructing secrets manager of type \"passphrase\": incorrect passphrase",
    "stack not found",
    "failed to select stack: error: no stack named 'dev' found",
    "failed to set config: error: invalid configuration key: a:b:c",
    "failed to install project dependencies: error: npm ERR! 404 Not Found - GET @acme/missing",
    "unable to add environments: error: environment 'prod' not found",
    "invalid stack name",
]


@pytest.mark.parametrize("message", PASSING)
def test_passing_backend_and_network_failures_are_retried(message: str) -> None:
    assert transient.is_transient(UNKNOWN, message)


@pytest.mark.parametrize("message", FINAL)
def test_what_a_retry_cannot_fix_is_final(message: str) -> None:
    assert not transient.is_transient(UNKNOWN, message)


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_an_agent_out_of_reach_is_retried(code: grpc.StatusCode) -> None:
    assert transient.is_transient(code, "")


@pytest.mark.parametrize("code", [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ABORTED,
                                  grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAUTHENTICATED])
def test_a_refused_request_is_final(code: grpc.StatusCode) -> None:
    assert not transient.is_transient(code, "stack not found")


def test_the_retry_message_keeps_the_cause() -> None:
    message = transient.retry_message("could not list stacks: error: EOF")
    assert message.startswith("could not list stacks: error: EOF")
    assert "retrying" in message


@pytest.mark.parametrize("message", [
    "failed to run update: exit status 1\nstderr: error: EOF\n",
    "error: unexpected EOF",
])
def test_an_eof_is_passing_wherever_the_cli_prints_it(message: str) -> None:
    assert transient.is_transient(None, message)


def test_a_program_that_does_not_parse_is_final() -> None:
    message = "error: Program failed with an unhandled exception:\n  SyntaxError: unexpected EOF while parsing"
    assert not transient.is_transient(None, message)


@pytest.mark.parametrize("details", ["Socket closed", "Stream removed", "GOAWAY received", ""])
def test_an_operation_whose_call_to_the_agent_dropped_reads_as_passing(details: str) -> None:
    """An update's recorded message keeps no gRPC status: the text of a call that ended UNAVAILABLE (the pod went
    away mid-update) says so, and reads back as passing; a call the agent ended with its own error does not."""
    said = transient.lost_agent_message(grpc.StatusCode.UNAVAILABLE, details)
    assert said.startswith(details or "no details")
    assert transient.is_transient(None, said)
    assert not transient.is_transient(None, details or "no details")
    assert not transient.is_transient(None, transient.lost_agent_message(grpc.StatusCode.INTERNAL, details))
