// Package docs holds searchsync's user documentation, one topic per page
// (README.md in this directory is the index). It has no code; its test checks
// that the repository's Markdown — the top-level README.md and CHANGELOG.md
// and every page here — points only at things that exist: every relative
// link and image resolves to a file (and a linked heading to a heading of
// that page), and every repository path named in code (`scripts/demo.sh`,
// `deploy/prometheus-alerts.yml`) is there.
package docs
