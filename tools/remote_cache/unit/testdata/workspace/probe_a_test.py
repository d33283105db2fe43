assert sum(range(10)) == 45
