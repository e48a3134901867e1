"""Settings: the business configuration, its versions, and who receives a case."""
