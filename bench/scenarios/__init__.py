"""The four scenarios, run one after another on the same broker by ``bench.runner``."""
