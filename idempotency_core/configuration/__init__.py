"""The business configuration: what a source's (and a form's) effects contain."""
