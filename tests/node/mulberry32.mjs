// mulberry32: a small, fast, seeded PRNG, so the generated tokenizer corpora and requests are
// the same on every run. mulberry32(seed) returns rand(), uniform in [0, 1).
export function mulberry32(seed) {
  let state = seed | 0;
  return function rand() {
    state = (state + 0x6d2b79f5) | 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
