"""``python -m service.cli``: the same as the ``brewstream`` console script."""

from service.cli import main

main()
