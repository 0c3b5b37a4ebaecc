"""Tools the model can call: the notes notebook (:mod:`.notebook`) run through a jq sandbox (:mod:`.jq_sandbox`). Qt-free."""
