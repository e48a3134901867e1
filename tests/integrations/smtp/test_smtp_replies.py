"""The one rule from an SMTP reply to the engine's vocabulary (integrations/smtp).

Pure logic. The sender applies it at each command against scripted servers and the
sandbox's sink in tests/integrations/test_classification.py.
"""

from __future__ import annotations

import pytest

from integrations.base import Classification
from integrations.smtp.adapter import reply_classification


@pytest.mark.parametrize("code", [500, 550, 552, 553, 554])
@pytest.mark.parametrize("body_sent", [False, True])
def test_a_5xx_is_permanent_before_and_after_the_body(code, body_sent):
    assert reply_classification(code, body_sent=body_sent) == Classification.PERMANENT


@pytest.mark.parametrize("code", [421, 450, 451, 452, -1, 250, 354])
def test_anything_else_before_the_body_is_retryable(code):
    # -1: a reply smtplib could not read. 250 and 354 where the other was asked for.
    assert reply_classification(code, body_sent=False) == Classification.RETRYABLE


@pytest.mark.parametrize("code", [421, 451, 452, -1, 354])
def test_anything_else_after_the_body_is_ambiguous(code):
    assert reply_classification(code, body_sent=True) == Classification.AMBIGUOUS
