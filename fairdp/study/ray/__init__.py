"""Ray: connecting to a cluster or starting an embedded one (and reaping its processes), the
Tune driver of a study's packs and of a search, and the trainables Tune runs on the workers."""
