"""``brewstream board``: a live top-drinks board in the browser.

One small HTTP server reads what the pipelines already publish (the top-N snapshots,
the closed windows and the windows store) and pushes one JSON state document to every
open page as server-sent events.
"""
