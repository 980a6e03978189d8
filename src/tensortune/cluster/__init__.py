"""Work that spans processes and machines: tuners raced as Ray actors (:mod:`.race`).

Nothing here imports Ray until it is used, so the rest of tensortune runs without starting it.
"""
