"""An auditor's report per workflow type, replayed from `<prefix>.history` with faust-streaming."""
