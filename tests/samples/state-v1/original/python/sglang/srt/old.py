OLD = 1
