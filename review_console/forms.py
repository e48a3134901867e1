"""Forms of the console's actions. Each consequential one asks for a reason.

The hidden `confirm` field tells the first POST (from a button on the case page:
show the confirmation) from the second (from the confirmation page: do it), as
Django admin's delete action does.
"""

from __future__ import annotations

from typing import Any

from django import forms

from idempotency_core.review.cases import RESOLUTION_CODES
from idempotency_core.review.merge import SAME_RECORD_MESSAGE

REASON_HELP = "Kept with the decision in its history. Say what you checked and why this is right."


class ReasonForm(forms.Form):
    confirm = forms.CharField(widget=forms.HiddenInput, initial="yes")
    # One line, never autofocused (on a phone that opens the keyboard over the page): a
    # preset button fills it in, and the confirmation page focuses its button instead.
    reason = forms.CharField(
        widget=forms.TextInput(attrs={"class": "reason", "autocomplete": "off"}),
        help_text=REASON_HELP,
        strip=True,
    )


class TakeOwnershipForm(forms.Form):
    case = forms.TypedMultipleChoiceField(coerce=int, choices=())
    take_over = forms.BooleanField(required=False)
    next = forms.CharField(required=False)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Ids are checked by the service (open, owner); any integer is acceptable here.
        values = self.data.getlist("case") if hasattr(self.data, "getlist") else []
        field = self.fields["case"]
        assert isinstance(field, forms.TypedMultipleChoiceField)
        field.choices = [(v, v) for v in values]


class ReplayForm(ReasonForm):
    destination_checked = forms.BooleanField(
        required=False,
        label="I checked the CRM and it is not there",
    )


class ResolveForm(ReasonForm):
    destination_ref = forms.CharField(
        max_length=200,
        label="The record's number in the CRM",
        help_text="As the CRM shows it on the record you found.",
    )


class ResolveFoundForm(ReasonForm):
    """Resolve with the record the last lookup found: only the reason is typed (the
    reference is the one the lookup stored, read again on the server), so the reason
    box (ReasonForm's, focused) is all there is to fill. `lookup` is the lookup the
    reviewer saw (a guard against a newer one, never the source of the reference)."""

    lookup = forms.IntegerField(widget=forms.HiddenInput)


class CloseForm(ReasonForm):
    # "Other (explained in the reason)" is chosen until the reviewer picks another:
    # always true, since the reason is required, and closing needs no extra action.
    resolution_code = forms.ChoiceField(
        choices=list(RESOLUTION_CODES.items()), label="Resolution", initial="other"
    )


class MergeForm(ReasonForm):
    survivor = forms.CharField(
        max_length=200,
        label="Record that survives",
        error_messages={"required": "Choose the record that stays."},
    )
    duplicate = forms.CharField(
        max_length=200,
        label="Record merged into it",
        error_messages={"required": "Choose the record merged into it."},
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("survivor") and data.get("survivor") == data.get("duplicate"):
            raise forms.ValidationError(SAME_RECORD_MESSAGE.format(ref=data["survivor"]))
        return data


class EmailSettleForm(ReasonForm):
    """An email case settled by what the customer says: received, or not (send again)."""

    outcome = forms.ChoiceField(
        choices=[
            ("received", "The customer confirms they received the email"),
            ("send_again", "Not received: send it again (a new email, linked to the first)"),
        ],
        widget=forms.RadioSelect,
        label="What did the customer say?",
    )
