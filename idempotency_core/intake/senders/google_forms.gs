/**
 * Onefold for Google Forms: posts each response to Onefold's hook, signed.
 *
 * Google Forms has no webhook. This Apps Script, bound to the form, runs on the
 * form's "On form submit" trigger and POSTs the response as JSON to the hook of
 * a source created with `--profile googleforms`:
 *
 *   {"response_id", "form_id", "form_title", "submitted_at" (ISO 8601),
 *    "respondent_email" (when the form collects it),
 *    "answers": [{"title", "type", "value"}]}
 *
 * signed as Onefold's generic contract says:
 *   Onefold-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
 *
 * The response id is Google's own and never changes, so a re-run of the trigger
 * (or the retry below) is recognised by Onefold as the same submission.
 *
 * Setup (docs/senders.md):
 *  1. manage.py create_source NAME --profile googleforms   (prints the secret and path)
 *  2. In the form: Extensions → Apps Script, paste this file.
 *  3. Project Settings → Script properties: ONEFOLD_HOOK_URL = https://<host>/hooks/NAME/,
 *     ONEFOLD_SECRET = the printed secret.
 *  4. Triggers → Add trigger: onFormSubmit, event source "From form", "On form submit".
 *
 * References: FormApp (developers.google.com/apps-script/reference/forms),
 * UrlFetchApp.fetch, Utilities.computeHmacSha256Signature.
 */

var ATTEMPTS = 3;

function onFormSubmit(e) {
  var response = e.response;
  var form = FormApp.getActiveForm();
  var body = JSON.stringify({
    response_id: response.getId(),
    form_id: form.getId(),
    form_title: form.getTitle(),
    submitted_at: response.getTimestamp().toISOString(),
    respondent_email: response.getRespondentEmail() || "",
    answers: response.getItemResponses().map(function (item) {
      return {
        title: item.getItem().getTitle(),
        type: String(item.getItem().getType()),
        value: item.getResponse()
      };
    })
  });
  var properties = PropertiesService.getScriptProperties();
  deliver_(properties.getProperty("ONEFOLD_HOOK_URL"), properties.getProperty("ONEFOLD_SECRET"), body);
}

function deliver_(url, secret, body) {
  for (var attempt = 1; attempt <= ATTEMPTS; attempt++) {
    // A fresh timestamp and signature per attempt: Onefold accepts 5 minutes of skew.
    var t = Math.floor(Date.now() / 1000);
    var mac = Utilities.computeHmacSha256Signature(t + "." + body, secret, Utilities.Charset.UTF_8);
    var hex = mac.map(function (b) { return ("0" + (b & 0xff).toString(16)).slice(-2); }).join("");
    var answer = UrlFetchApp.fetch(url, {
      method: "post",
      contentType: "application/json",
      payload: body,
      headers: { "Onefold-Signature": "t=" + t + ",v1=" + hex },
      muteHttpExceptions: true
    });
    var code = answer.getResponseCode();
    if (code === 200) return;
    if (code >= 400 && code < 500 && code !== 429) {
      throw new Error("Onefold refused the response (" + code + "): " + answer.getContentText());
    }
    Utilities.sleep(2000 * attempt);
  }
  // Still failing: the trigger's failure notification tells the form's owner.
  throw new Error("Onefold did not accept the response after " + ATTEMPTS + " attempts");
}
