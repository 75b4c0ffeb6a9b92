package search

import (
	"container/list"
	"sync"
)

// stateCache keeps the documents this consumer wrote last (by alias and
// id, with the version written), so that a partial event whose state is
// known needs no _mget: the next event of a document, at the version after
// the one cached, merges onto the cached state.
//
// Why that is exact: the state of a document at version v is a function of
// the aggregate's events up to v, whoever wrote it; the engine's version of
// a document only grows (external versions). The cache is used only when a
// batch's events of the document continue the cached version without a
// gap (cached v, then v+1, v+2, …), which the claim's unbroken runs per
// aggregate make the common case. If another relay (the partition's next
// owner) wrote later versions meanwhile, the write from the cache carries a
// version the engine already has or passed, and is refused as stale (409),
// exactly as the event would be after an _mget; the entry is dropped then,
// as after any write that did not succeed. Anything else (a version gap, an
// unknown document, an entry evicted) falls back to the _mget.
//
// Entries are never changed in place: a hit hands out the map, onto which
// fold merges copy-on-write (projections.Writable), and a write caches the
// state fold built for it, which may share maps with the entry it replaced.
type stateCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *cached, most recently used first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct{ alias, id string }

type cached struct {
	key     cacheKey
	version int64
	doc     map[string]any
}

// newStateCache returns a cache of at most max documents; nil (no cache)
// when max < 1.
func newStateCache(max int) *stateCache {
	if max < 1 {
		return nil
	}
	return &stateCache{max: max, order: list.New(), byKey: map[cacheKey]*list.Element{}}
}

// get returns the cached state of alias/id and its version, when the
// steps (the batch's events of the document, in order) continue it without
// a gap; the entry is left for put or drop after the write.
func (c *stateCache) get(alias, id string, steps []step) (map[string]any, int64, bool) {
	if c == nil || len(steps) == 0 {
		return nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[cacheKey{alias, id}]
	if !ok {
		return nil, 0, false
	}
	e := el.Value.(*cached)
	want := e.version
	for _, s := range steps {
		if want++; s.res.Version != want {
			return nil, 0, false
		}
	}
	c.order.MoveToFront(el)
	return e.doc, e.version, true
}

// put records that alias/id holds doc at version (a write the engine took);
// a nil doc (a hard delete) drops the entry.
func (c *stateCache) put(alias, id string, version int64, doc map[string]any) {
	if c == nil {
		return
	}
	if doc == nil {
		c.drop(alias, id)
		return
	}
	k := cacheKey{alias, id}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		e := el.Value.(*cached)
		e.version, e.doc = version, doc
		c.order.MoveToFront(el)
		return
	}
	c.byKey[k] = c.order.PushFront(&cached{key: k, version: version, doc: doc})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cached).key)
	}
}

// drop forgets alias/id (its write failed or was stale: the engine's state
// is not known).
func (c *stateCache) drop(alias, id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[cacheKey{alias, id}]; ok {
		c.order.Remove(el)
		delete(c.byKey, cacheKey{alias, id})
	}
}

// dropAlias forgets every document of alias.
func (c *stateCache) dropAlias(alias string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.order.Front(); el != nil; {
		next := el.Next()
		if k := el.Value.(*cached).key; k.alias == alias {
			c.order.Remove(el)
			delete(c.byKey, k)
		}
		el = next
	}
}

// len is the number of documents cached.
func (c *stateCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
