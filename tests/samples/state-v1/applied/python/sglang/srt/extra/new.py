NEW = 2
