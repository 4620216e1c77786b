"""The HLTM query path (Dagster-free): identity → permitted subtree → three retrievers → cited
answer, logged with its cost.

* `scope`      identities and the subtree filter (`Scope.chroma_where`, `Scope.sql_predicate`)
* `permitted`  the permitted set of one request: the subtree's nodes, derived once
* `boundary`   `ScopedMemory`, the ONLY reader of memory content (vector search and fetch by id)
* `chroma_subtree`   a contract's own Chroma collection, asked for a subtree's items
* `subtree_vectors`  exact search over a small scope's own vectors (cached per node version)
* `parse`      question → intent + `field: value` pairs (the offline `parse_query` answer)
* `retrieve`   facet / QA / summary retrievers with `k_facet`, `k_qa`, `k_summary`; the context
* `compose`    the offline `answer` composer (cites only ids in its context)
* `engine`     `QueryEngine.ask` / `ask()`: the one entry point (Python, CLI, HTTP)
* `log`        the `query_log` table (input of query-pattern mining)
* `access`     bearer tokens → identities;  `http`: the Starlette endpoint
* `api`        the agent-facing models and the OpenAPI spec;  `mcp_server`: the MCP tools
* `rankings`   a vacancy's ranking, read only inside the caller's subtree
* `evaluation`, `baselines`, `leakage`, `metrics`: the evaluation harness and isolation test
* `demo`       the one-question step of `hltm demo`
"""
