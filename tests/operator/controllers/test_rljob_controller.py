"""The RLJob controller's create/update handler: a call the API server refuses reaches kopf as a one-line
TemporaryError (retried, no traceback in the operator's log), counted in the operator's metrics."""

from __future__ import annotations

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from rlplace_operator.controllers import rljob
from rlplace_operator.server.metrics import OperatorMetrics


def test_a_refused_call_is_a_one_line_temporary_error_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = ApiException(status=403, reason="Forbidden")
    refused.body = '{"message": "clusterqueues.kueue.x-k8s.io \\"q\\" is forbidden"}'

    def run(*_: object, **__: object) -> None:
        raise refused

    monkeypatch.setattr(rljob, "run", run)
    monkeypatch.setattr(rljob, "observer_of", lambda memo, kwargs: None)
    memo = kopf.Memo(kube=None, ledger=None, metrics=OperatorMetrics())
    body = kopf.Body({"metadata": {"namespace": "ns", "name": "train", "uid": "u"}, "spec": {}, "status": {}})
    with pytest.raises(kopf.TemporaryError) as raised:
        rljob.rljob_changed(body=body, memo=memo)
    assert str(raised.value) == (
        'RLJob ns/train: the API server refused a call (403: clusterqueues.kueue.x-k8s.io "q" is forbidden)'
    )
    assert raised.value.delay == rljob.API_RETRY_SECONDS
    errors = memo.metrics.reconcile_errors.labels("rljob", "api")._value.get()
    assert errors == 1
