"""Journey: what the customer and the CRM get on each path of a form."""
