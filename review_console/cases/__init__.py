"""Cases: the queue, the case page and every decision on a case (one at a time or in groups)."""
