"""The drink-count pipeline: orders in, exact counts per drink out (seed 02).

``orders`` says what a valid order is, ``aggregate`` counts a batch inside Spark, ``sink``
is the data path of one batch, ``topn`` and ``board`` the top-N board, ``pipeline``
what the runner needs to run it all.
"""
