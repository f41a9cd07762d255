"""Fixtures for the Program tests: the Program controller plus its file server running in this process on a
loopback port (the CRDs, clients and namespaces come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from program_testlib import Running, running

from pko.kube import client as kclient


@pytest.fixture
async def controller(kc: kclient.Client, namespace: str) -> AsyncIterator[Running]:
    async with running(kc, namespace) as r:
        yield r
