//! Splicing a stored prefix with incremental ids, and trailing trims.
//!
//! The TITO families differ only in what they do at the seam:
//! - Qwen3 / Nemotron 3 / MiniMax: the model stops at an end marker but the
//!   template writes the marker *and* a newline, so the newline is appended
//!   when the prefix ends with the marker ([`Splice::append_after`]).
//! - GLM-4.7: the model may stop at `<|observation|>` or `<|user|>`, which the
//!   next render emits itself, so such a last id is dropped
//!   ([`Splice::drop_last_if_in`]).

/// The seam rule applied between a stored prefix and incremental ids.
#[derive(Debug, Clone, Default)]
pub struct Splice {
    /// `(x, ys)`: when the prefix ends with `x`, append `ys`.
    pub append_after: Option<(u32, Vec<u32>)>,
    /// When the prefix's last id is one of these, drop it.
    pub drop_last_if_in: Vec<u32>,
}

impl Splice {
    /// Length of `prefix` to keep and the ids to append after it.
    ///
    /// `drop_last_if_in` is applied first; `append_after` then looks at the
    /// last id that remains.
    #[must_use]
    pub fn seam<'s>(&'s self, prefix: &[u32]) -> (usize, &'s [u32]) {
        let mut keep = prefix.len();
        if keep > 0 && self.drop_last_if_in.contains(&prefix[keep - 1]) {
            keep -= 1;
        }
        let extra: &[u32] = match &self.append_after {
            Some((x, ys)) if keep > 0 && prefix[keep - 1] == *x => ys,
            _ => &[],
        };
        (keep, extra)
    }

    /// `prefix` (with the seam rule applied) followed by `incremental`.
    ///
    /// ```
    /// use tito_fast::merge::Splice;
    /// let qwen = Splice { append_after: Some((151645, vec![198])), ..Default::default() };
    /// assert_eq!(qwen.merge(&[1, 151645], &[151644]), vec![1, 151645, 198, 151644]);
    /// let glm = Splice { drop_last_if_in: vec![9, 8], ..Default::default() };
    /// assert_eq!(glm.merge(&[1, 9], &[8, 2]), vec![1, 8, 2]);
    /// ```
    #[must_use]
    pub fn merge(&self, prefix: &[u32], incremental: &[u32]) -> Vec<u32> {
        let (keep, extra) = self.seam(prefix);
        let mut out = Vec::with_capacity(keep + extra.len() + incremental.len());
        out.extend_from_slice(&prefix[..keep]);
        out.extend_from_slice(extra);
        out.extend_from_slice(incremental);
        out
    }
}

/// Length of `ids` once every trailing id found in `trim_ids` is stripped
/// (repeatedly, as the reference comparator does).
///
/// ```
/// use tito_fast::merge::trimmed_len;
/// assert_eq!(trimmed_len(&[1, 2, 3, 3, 2], &[2, 3]), 1);
/// ```
#[must_use]
pub fn trimmed_len(ids: &[u32], trim_ids: &[u32]) -> usize {
    let mut n = ids.len();
    while n > 0 && trim_ids.contains(&ids[n - 1]) {
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_concatenation() {
        assert_eq!(Splice::default().merge(&[1, 2], &[3]), vec![1, 2, 3]);
        assert_eq!(Splice::default().merge(&[], &[]), Vec::<u32>::new());
    }

    #[test]
    fn append_after_only_on_match() {
        let s = Splice { append_after: Some((5, vec![6])), ..Default::default() };
        assert_eq!(s.merge(&[1, 5], &[7]), vec![1, 5, 6, 7]);
        assert_eq!(s.merge(&[5, 1], &[7]), vec![5, 1, 7]);
        assert_eq!(s.merge(&[], &[7]), vec![7]);
    }

    #[test]
    fn drop_then_append() {
        let s = Splice { append_after: Some((1, vec![6, 6])), drop_last_if_in: vec![9] };
        assert_eq!(s.merge(&[1, 9], &[]), vec![1, 6, 6]);
        assert_eq!(s.merge(&[9], &[2]), vec![2]);
    }

    #[test]
    fn trims() {
        assert_eq!(trimmed_len(&[], &[1]), 0);
        assert_eq!(trimmed_len(&[1, 1], &[1]), 0);
        assert_eq!(trimmed_len(&[1, 2], &[]), 2);
    }
}
