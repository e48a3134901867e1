"""The business configuration: what a source's (and a form's) effects contain.

Per source and per form (`"*"` for the rest): the enquiry's and the contact's CRM
properties, the enquiry's pipeline and stage, the task's title, assignee and due date,
and the confirmation's subject, text, HTML, Reply-To and languages, each a template in
Django's template language over the submission's values (docs/configuration.md).

- `document.py`: the document's shape, its validation (each problem with its place),
  and the block that applies to a submission;
- `templates.py`: the sandboxed template engine (no files, no debug, builtins only)
  and the line of a syntax error;
- `yamlfile.py`: the file `manage.py config` reads and writes, with line numbers;
- `versions.py`: the services: the current version, apply (validated whole, one new
  version, audited), export, and the console's edit of one section and restore.

What one operation sends is rendered from here once, when it is first attempted, and
stored on the operation (execution/content.py): this package says what the business
configured, never what an operation already sent.
"""
