// Where mha's large, long-lived buffers live: the packed weights of a layer,
// KV caches and the pooled scratch of its calls. By default they are advised
// onto transparent huge pages (Linux madvise, where the system allows it),
// which on most hosts reads them from DRAM faster: a decode step on a Zen 4
// VM ran 1.04-1.12x as fast. Some virtual machines serve huge pages more
// slowly than small ones, at least at times (on one Zen 5 VM a plain read
// loop ran 0.86-0.97x as fast on them and a decode step 0.78-1.02x for half
// an hour, then 1.00-1.29x and 0.95-1.05x): measure yours, and turn the
// advice off where it loses.
#ifndef MHA_MEMORY_H_
#define MHA_MEMORY_H_

namespace mha {

// Whether buffers allocated from now on are advised onto huge pages (true
// until set otherwise). Buffers already allocated keep their pages: call it
// before constructing layers and caches. Process-wide; safe to call from any
// thread.
void set_huge_pages(bool advise);
bool huge_pages();

}  // namespace mha

#endif  // MHA_MEMORY_H_
