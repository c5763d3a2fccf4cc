"""Who runs where and when: rlplace's own queue (rules, queue, ledger, demand) and Kueue (kueue), behind one door for the
reconcile (admitter)."""
