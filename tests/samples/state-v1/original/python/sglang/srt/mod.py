def f0(x):
    return x + 0

def f1(x):
    return x + 1

def f2(x):
    return x + 2

def f3(x):
    return x + 3

def f4(x):
    return x + 4

def f5(x):
    return x + 5

def f6(x):
    return x + 6

def f7(x):
    return x + 7

def f8(x):
    return x + 8

def f9(x):
    return x + 9

def f10(x):
    return x + 10

def f11(x):
    return x + 11

