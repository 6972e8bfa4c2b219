__version__ = "0.1.0"
TORCH_VERSION = "2.13.0"
