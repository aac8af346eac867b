//! RFC 6962 / RFC 9162 Merkle tree math: leaf and node hashes, roots, inclusion
//! and consistency proofs, and the Go `tlog` stored-hash layout.
//!
//! It exists apart from storage so that the math is pure and checked against
//! the published known answers, and so that the writer (which holds only the
//! right edge of the tree in memory) and the readers (which fetch stored hashes
//! from SQLite) share one proof generator. Proof generation asks a
//! [`SubtreeHashes`] source for *perfect* subtrees only; every perfect subtree
//! of a tree of size `n` is a stored hash once its last leaf is appended, so a
//! proof for any historical size costs O(log n) lookups.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A SHA-256 output.
pub type Hash = [u8; 32];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

/// RFC 6962 leaf hash: `SHA-256(0x00 ‖ data)`. Our leaf input is the raw
/// 32-byte `record_hash`.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// RFC 6962 interior node: `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree, `SHA-256("")` (RFC 6962, unlike Go `tlog`).
pub fn empty_root() -> Hash {
    sha256(b"")
}

/// The side a proof sibling sits on. `Left` means `parent = H(0x01 ‖ sibling ‖ current)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    Left,
    Right,
}

/// A source of perfect-subtree hashes. `(level, n)` covers the leaves
/// `[n << level, (n + 1) << level)`; level 0 is a leaf hash.
pub trait SubtreeHashes {
    type Error;
    fn subtree(&mut self, level: u32, n: u64) -> Result<Hash, Self::Error>;
}

/// Largest power of two strictly less than `n` (`n >= 2`): the RFC 6962 split.
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    let mut k = 1u64;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// `MTH(D[lo:hi])` for a range that the RFC 6962 recursion produces: split
/// greedily into aligned perfect subtrees, folded right to left.
pub fn range_hash<R: SubtreeHashes>(r: &mut R, lo: u64, hi: u64) -> Result<Hash, R::Error> {
    if lo >= hi {
        return Ok(empty_root());
    }
    // At most 64 perfect pieces; kept on the stack (this runs per proof step).
    let mut parts = [[0u8; 32]; 64];
    let mut count = 0usize;
    let mut at = lo;
    while at < hi && count < parts.len() {
        let rem = hi - at;
        // Largest power of two <= rem.
        let level = 63 - rem.leading_zeros();
        debug_assert!(
            at.is_multiple_of(1u64 << level),
            "unaligned range {lo}..{hi}"
        );
        parts[count] = r.subtree(level, at >> level)?;
        count += 1;
        at += 1u64 << level;
    }
    let mut h = parts[count - 1];
    for left in parts[..count - 1].iter().rev() {
        h = node_hash(left, &h);
    }
    Ok(h)
}

/// RFC 6962 §2.1.1 `PATH(m, D[n])`, leaf to root, with the side of each
/// sibling. Requires `m < n`.
pub fn inclusion_proof<R: SubtreeHashes>(
    r: &mut R,
    m: u64,
    n: u64,
) -> Result<Vec<(Hash, Position)>, R::Error> {
    let mut top_down = Vec::with_capacity(64);
    let (mut lo, mut hi) = (0u64, n);
    while hi - lo > 1 {
        let k = split(hi - lo);
        if m < lo + k {
            top_down.push((range_hash(r, lo + k, hi)?, Position::Right));
            hi = lo + k;
        } else {
            top_down.push((range_hash(r, lo, lo + k)?, Position::Left));
            lo += k;
        }
    }
    top_down.reverse();
    Ok(top_down)
}

/// RFC 6962 §2.1.2 `PROOF(m, D[n])` for `0 < m <= n`; empty when `m == n`.
pub fn consistency_proof<R: SubtreeHashes>(
    r: &mut R,
    m: u64,
    n: u64,
) -> Result<Vec<Hash>, R::Error> {
    let mut top_down = Vec::with_capacity(64);
    let (mut lo, mut hi, mut m, mut whole) = (0u64, n, m, true);
    loop {
        let size = hi - lo;
        if m == size {
            if !whole {
                top_down.push(range_hash(r, lo, hi)?);
            }
            break;
        }
        let k = split(size);
        if m <= k {
            top_down.push(range_hash(r, lo + k, hi)?);
            hi = lo + k;
        } else {
            top_down.push(range_hash(r, lo, lo + k)?);
            lo += k;
            m -= k;
            whole = false;
        }
    }
    top_down.reverse();
    Ok(top_down)
}

/// The sibling sides that an inclusion proof for `(index, size)` must have,
/// derived from the RFC 9162 §2.1.3.2 control flow. `None` if `index >= size`.
pub fn positions(index: u64, size: u64) -> Option<Vec<Position>> {
    if index >= size {
        return None;
    }
    let mut out = Vec::new();
    let (mut fnode, mut snode) = (index, size - 1);
    while snode > 0 {
        if fnode & 1 == 1 || fnode == snode {
            out.push(Position::Left);
            if fnode & 1 == 0 {
                while !(fnode & 1 == 1 || fnode == 0) {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            out.push(Position::Right);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    Some(out)
}

/// Folds a sided proof onto a leaf hash.
pub fn root_from_proof(leaf: &Hash, proof: &[(Hash, Position)]) -> Hash {
    proof.iter().fold(*leaf, |cur, (sib, pos)| match pos {
        Position::Left => node_hash(sib, &cur),
        Position::Right => node_hash(&cur, sib),
    })
}

/// Why an inclusion proof was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InclusionError {
    #[error("leaf index {0} is not below tree size {1}")]
    IndexOutOfRange(u64, u64),
    #[error("proof has {got} steps, ({index}, {size}) needs {want}")]
    Length {
        index: u64,
        size: u64,
        got: usize,
        want: usize,
    },
    #[error("proof step {0} has the wrong position for (leaf_index, tree_size)")]
    Position(usize),
    #[error("proof does not lead to the root")]
    Root,
}

/// Verifies an inclusion proof whose positions must agree with `(index, size)`.
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Hash,
    proof: &[(Hash, Position)],
    root: &Hash,
) -> Result<(), InclusionError> {
    let want = positions(index, size).ok_or(InclusionError::IndexOutOfRange(index, size))?;
    if want.len() != proof.len() {
        return Err(InclusionError::Length {
            index,
            size,
            got: proof.len(),
            want: want.len(),
        });
    }
    if let Some(i) = want.iter().zip(proof).position(|(w, (_, p))| w != p) {
        return Err(InclusionError::Position(i));
    }
    if root_from_proof(leaf, proof) != *root {
        return Err(InclusionError::Root);
    }
    Ok(())
}

/// RFC 9162 §2.1.4.2 consistency verification between sizes `first <= second`.
pub fn verify_consistency(
    first: u64,
    second: u64,
    first_root: &Hash,
    second_root: &Hash,
    proof: &[Hash],
) -> bool {
    if first == second {
        return proof.is_empty() && first_root == second_root;
    }
    if first == 0 {
        // Every tree extends the empty tree; the proof must be empty.
        return proof.is_empty() && *first_root == empty_root();
    }
    if first > second || proof.is_empty() {
        return false;
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if first & (first - 1) == 0 {
        path.push(*first_root);
    }
    path.extend_from_slice(proof);
    let (mut fnode, mut snode) = (first - 1, second - 1);
    while fnode & 1 == 1 {
        fnode >>= 1;
        snode >>= 1;
    }
    let mut fr = path[0];
    let mut sr = path[0];
    for c in &path[1..] {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fnode & 1 == 0 {
                while !(fnode & 1 == 1 || fnode == 0) {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    fr == *first_root && sr == *second_root && snode == 0
}

// === Go tlog stored-hash layout ===

/// Go `tlog.StoredHashIndex`: the position of subtree `(level, n)` in the
/// append-only sequence of stored hashes.
pub fn stored_hash_index(level: u32, n: u64) -> u64 {
    let mut n = n;
    for _ in 0..level {
        n = 2 * n + 1;
    }
    let mut i = 0u64;
    while n > 0 {
        i += n;
        n >>= 1;
    }
    i + u64::from(level)
}

/// Go `tlog.StoredHashCount`: how many hashes a tree of `size` leaves stores.
pub fn stored_hash_count(size: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    let mut count = stored_hash_index(0, size - 1) + 1;
    let mut i = size - 1;
    while i & 1 == 1 {
        count += 1;
        i >>= 1;
    }
    count
}

/// The leaf whose append wrote subtree `(level, n)`: its last leaf. The hash
/// sits at offset `level` among the hashes that leaf appended.
pub fn writer_leaf(level: u32, n: u64) -> u64 {
    ((n + 1) << level) - 1
}

// === Frontier ===

/// The right edge of a tree: the perfect subtrees that make up `[0, size)`,
/// largest (leftmost) first. Enough to append leaves and compute the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    // INVARIANT: `nodes[i]` is the subtree for the i-th set bit of `size`,
    // from the most significant bit down.
    nodes: Vec<Hash>,
}

impl Frontier {
    pub fn empty() -> Frontier {
        Frontier {
            size: 0,
            nodes: Vec::new(),
        }
    }

    /// Rebuilds the frontier of a tree of `size` leaves from stored hashes.
    pub fn load<R: SubtreeHashes>(r: &mut R, size: u64) -> Result<Frontier, R::Error> {
        let mut nodes = Vec::new();
        for (level, n) in Self::blocks_of(size) {
            nodes.push(r.subtree(level, n)?);
        }
        Ok(Frontier { size, nodes })
    }

    /// `(level, n)` of each perfect subtree of `[0, size)`, leftmost first.
    pub fn blocks_of(size: u64) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        let mut start = 0u64;
        for level in (0..64u32).rev() {
            if size & (1u64 << level) != 0 {
                out.push((level, start >> level));
                start += 1u64 << level;
            }
        }
        out
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The hash of perfect subtree `(level, n)` if it is part of this frontier.
    pub fn node(&self, level: u32, n: u64) -> Option<Hash> {
        if level >= 64 || self.size & (1u64 << level) == 0 {
            return None;
        }
        // The subtree for bit `level` starts after all larger subtrees.
        let above = if level == 63 {
            0
        } else {
            self.size >> (level + 1) << (level + 1)
        };
        if n.checked_shl(level) != Some(above) {
            return None;
        }
        let index = (self.size >> level).count_ones() as usize - 1;
        self.nodes.get(index).copied()
    }

    /// Appends a leaf hash and returns the hashes Go `tlog` stores for it:
    /// the leaf first, then one per subtree the leaf completes.
    pub fn append(&mut self, leaf: Hash) -> Vec<Hash> {
        let mut out = Vec::with_capacity(4);
        out.push(leaf);
        let mut h = leaf;
        let mut t = self.size;
        while t & 1 == 1 {
            // INVARIANT: a set low bit of `size` means a completed subtree on the stack.
            let Some(left) = self.nodes.pop() else { break };
            h = node_hash(&left, &h);
            out.push(h);
            t >>= 1;
        }
        self.nodes.push(h);
        self.size += 1;
        out
    }

    /// The RFC 6962 root of the tree.
    pub fn root(&self) -> Hash {
        let mut it = self.nodes.iter().rev();
        let Some(last) = it.next() else {
            return empty_root();
        };
        it.fold(*last, |acc, left| node_hash(left, &acc))
    }
}

/// Hashes for a freshly appended run of leaves `[old.size, old.size + rows.len())`:
/// subtrees ending at or before the old size come from the old frontier,
/// later ones from the rows the new leaves stored. Lets the writer build
/// receipts and its consistency self-check without reading the database.
pub struct BatchHashes<'a> {
    pub old: &'a Frontier,
    pub rows: &'a [Vec<Hash>],
}

impl SubtreeHashes for BatchHashes<'_> {
    type Error = String;
    fn subtree(&mut self, level: u32, n: u64) -> Result<Hash, String> {
        let last = writer_leaf(level, n);
        if last < self.old.size() {
            return self
                .old
                .node(level, n)
                .ok_or_else(|| format!("subtree ({level}, {n}) is not on the frontier"));
        }
        let row = usize::try_from(last - self.old.size())
            .ok()
            .and_then(|i| self.rows.get(i))
            .ok_or_else(|| format!("subtree ({level}, {n}) is beyond the batch"))?;
        row.get(level as usize)
            .copied()
            .ok_or_else(|| format!("subtree ({level}, {n}) was not stored"))
    }
}

/// In-memory stored hashes for a whole tree; used by tests and the verifier.
#[derive(Debug, Default, Clone)]
pub struct MemoryHashes {
    /// Row `i` holds the hashes leaf `i` stored (level 0 first).
    pub rows: Vec<Vec<Hash>>,
}

impl MemoryHashes {
    pub fn from_leaves(leaves: &[Hash]) -> (MemoryHashes, Frontier) {
        let mut f = Frontier::empty();
        let rows = leaves.iter().map(|l| f.append(*l)).collect();
        (MemoryHashes { rows }, f)
    }
}

impl SubtreeHashes for MemoryHashes {
    type Error = String;
    fn subtree(&mut self, level: u32, n: u64) -> Result<Hash, String> {
        usize::try_from(writer_leaf(level, n))
            .ok()
            .and_then(|i| self.rows.get(i))
            .and_then(|r| r.get(level as usize))
            .copied()
            .ok_or_else(|| format!("no stored hash for subtree ({level}, {n})"))
    }
}
