"""How an answer is graded: reading the answer out of a reply (tags, boxed), exact arithmetic without eval,
verifiers for numbers, maths and expressions, tool calls read and checked (BFCL's checker); each returns a
`Verdict`. Grading never imports environments: an environment uses a grader, a grader knows no environment."""
