#!/usr/bin/env bash
# Smoke test of a running node (the features searchsync relies on). usage: smoke.sh [URL]
set -euo pipefail
U="${1:-http://127.0.0.1:9200}"
fail() { echo "FAIL: $*"; exit 1; }
j() { curl -s -H 'Content-Type: application/json' "$@"; }
j -XDELETE "$U/docs_v1?ignore_unavailable=true" -o /dev/null; j -XDELETE "$U/docs_v2?ignore_unavailable=true" -o /dev/null
echo "== create index with mapping + _meta"
r=$(j -XPUT "$U/docs_v1" -d '{"settings":{"number_of_shards":1,"number_of_replicas":0},
 "mappings":{"_meta":{"searchsync_schema":"v1","source_table":"documents"},
  "properties":{"title":{"type":"text"},"tenant":{"type":"keyword"},"n":{"type":"long"}}}}'); echo "$r"
[[ "$r" == *'"acknowledged":true'* ]] || fail create
echo "== _bulk external versions"
r=$(printf '%s\n' \
 '{"index":{"_index":"docs_v1","_id":"1","version":5,"version_type":"external"}}' '{"title":"hello world","tenant":"a","n":1}' \
 '{"index":{"_index":"docs_v1","_id":"2","version":3,"version_type":"external"}}' '{"title":"second doc","tenant":"b","n":2}' \
 | curl -s -H 'Content-Type: application/x-ndjson' -XPOST "$U/_bulk?refresh=true" --data-binary @-); echo "$r"
[[ "$r" == *'"errors":false'* ]] || fail bulk
echo "== stale version via _bulk -> 409"
r=$(printf '%s\n' '{"index":{"_index":"docs_v1","_id":"1","version":4,"version_type":"external"}}' '{"title":"stale","tenant":"a","n":0}' \
 | curl -s -H 'Content-Type: application/x-ndjson' -XPOST "$U/_bulk" --data-binary @-); echo "$r"
[[ "$r" == *'"status":409'* && "$r" == *version_conflict_engine_exception* ]] || fail stale-bulk
echo "== stale version via single index API -> HTTP 409"
code=$(j -o /tmp/ostest/stale.json -w '%{http_code}' -XPUT "$U/docs_v1/_doc/1?version=5&version_type=external" -d '{"title":"same version"}'); cat /tmp/ostest/stale.json; echo " http=$code"
[[ "$code" == 409 ]] && grep -q version_conflict_engine_exception /tmp/ostest/stale.json || fail stale-single
echo "== _mget"
r=$(j "$U/docs_v1/_mget" -d '{"ids":["1","2","404"]}'); echo "$r"
[[ "$r" == *'"_version":5'* && "$r" == *'"found":false'* ]] || fail mget
echo "== _aliases add alias with filter"
r=$(j -XPOST "$U/_aliases" -d '{"actions":[{"add":{"index":"docs_v1","alias":"docs_a","filter":{"term":{"tenant":"a"}}}}]}'); echo "$r"
[[ "$r" == *'"acknowledged":true'* ]] || fail alias
echo "== _search through filtered alias"
r=$(j "$U/docs_a/_search" -d '{"query":{"match_all":{}}}'); echo "$r"
[[ "$r" == *'"total":{"value":1'* && "$r" == *'hello world'* ]] || fail alias-search
echo "== mapping _meta"
r=$(j "$U/docs_v1/_mapping"); echo "$r"
[[ "$r" == *'"searchsync_schema":"v1"'* ]] || fail meta
echo "== _reindex into docs_v2 (external versions kept)"
j -XPUT "$U/docs_v2" -d '{"settings":{"number_of_shards":1,"number_of_replicas":0},"mappings":{"_meta":{"searchsync_schema":"v2"},"properties":{"title":{"type":"text","analyzer":"english"},"tenant":{"type":"keyword"}}}}' >/dev/null
r=$(j -XPOST "$U/_reindex?refresh=true&wait_for_completion=true" -d '{"source":{"index":"docs_v1"},"dest":{"index":"docs_v2","version_type":"external"}}'); echo "$r"
[[ "$r" == *'"created":2'* && "$r" == *'"failures":[]'* ]] || fail reindex
r=$(j "$U/docs_v2/_doc/1"); echo "$r"; [[ "$r" == *'"_version":5'* ]] || fail reindex-version
echo "== alias swap (atomic) + count"
r=$(j -XPOST "$U/_aliases" -d '{"actions":[{"remove":{"index":"docs_v1","alias":"docs_a"}},{"add":{"index":"docs_v2","alias":"docs_a","filter":{"term":{"tenant":"a"}}}}]}'); echo "$r"
r=$(j "$U/docs_a/_count"); echo "$r"; [[ "$r" == *'"count":1'* ]] || fail count
echo "== analysis-common (english analyzer) + mapper-extras (scaled_float)"
r=$(j "$U/docs_v2/_analyze" -d '{"analyzer":"english","text":"running documents"}'); echo "$r"; [[ "$r" == *'"token":"run"'* ]] || fail analyze
r=$(j -XPUT "$U/extras_check" -d '{"mappings":{"properties":{"p":{"type":"scaled_float","scaling_factor":100}}}}'); echo "$r"; [[ "$r" == *'"acknowledged":true'* ]] || fail scaled_float
j -XDELETE "$U/extras_check" >/dev/null
echo "ALL CHECKS PASSED"
