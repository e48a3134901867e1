"""Staff review console: cases, evidence, actions and the audit trail."""
