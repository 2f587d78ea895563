version: str
__version__ = version = '0.5.21'
