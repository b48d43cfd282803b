//! Densifying TFLite sparse tensors (the TACO-style encoding of `SparsityParameters`).
//!
//! A dense tensor of rank n, optionally cut into k-dimensional blocks, is traversed in
//! `traversal_order` (n + k levels: a permutation of the n block-grid dimensions, then
//! of the k in-block dimensions). Each level is DENSE (every index, `dense_size` of
//! them) or SPARSE_CSR (for each position of the previous levels, a segment of
//! `array_indices` lists the indices present). Values are stored in traversal order.
//! Everything read from the file is bounds-checked: a malformed encoding is an error,
//! never a panic or an out-of-range write.

use super::schema_generated::tflite as fb;

/// Levels beyond this cannot come from a real tensor (TFLite tensors have rank <= 6 and
/// as many block dimensions); it also bounds the recursion.
const MAX_LEVELS: usize = 32;

enum Level {
    Dense(usize),
    Sparse {
        segments: Vec<usize>,
        indices: Vec<usize>,
    },
}

/// The decoded encoding (read-only during the traversal).
struct Layout {
    dims: Vec<usize>,
    traversal: Vec<usize>,
    block_map: Vec<usize>,
    block_size: Vec<usize>,
    levels: Vec<Level>,
    extent: Vec<usize>,
}

/// Where values come from and go to.
struct Sink<'a> {
    elem: usize,
    values: &'a [u8],
    next_value: usize,
    out: Vec<u8>,
}

/// The values of a SparseIndexVector union, whichever of its three types it holds.
fn index_vector(
    int32: Option<fb::Int32Vector>,
    uint16: Option<fb::Uint16Vector>,
    uint8: Option<fb::Uint8Vector>,
    what: &str,
) -> Result<Vec<usize>, String> {
    if let Some(v) = int32 {
        return v
            .values()
            .map(|v| v.iter().collect::<Vec<i32>>())
            .unwrap_or_default()
            .into_iter()
            .map(|x| usize::try_from(x).map_err(|_| format!("{what} holds {x}")))
            .collect();
    }
    if let Some(v) = uint16 {
        return Ok(v
            .values()
            .map(|v| v.iter().map(usize::from).collect())
            .unwrap_or_default());
    }
    if let Some(v) = uint8 {
        return Ok(v
            .values()
            .map(|v| v.iter().map(usize::from).collect())
            .unwrap_or_default());
    }
    Err(format!("a sparse dimension has no {what}"))
}

/// Densifies `values` (stored in traversal order) into a row-major tensor of `shape`.
pub fn densify(
    shape: &[u32],
    elem: usize,
    values: &[u8],
    sp: &fb::SparsityParameters,
) -> Result<Vec<u8>, String> {
    let n = shape.len();
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let to_usizes = |v: Option<flatbuffers::Vector<'_, i32>>, what: &str| {
        v.map(|v| v.iter().collect::<Vec<i32>>())
            .unwrap_or_default()
            .into_iter()
            .map(|x| usize::try_from(x).map_err(|_| format!("{what} holds {x}")))
            .collect::<Result<Vec<usize>, String>>()
    };
    let traversal = to_usizes(sp.traversal_order(), "traversal_order")?;
    let block_map = to_usizes(sp.block_map(), "block_map")?;
    let k = block_map.len();
    if traversal.len() != n + k || n + k > MAX_LEVELS {
        return Err(format!(
            "traversal_order has {} entries; a rank-{n} tensor with {k} block dimensions needs {}",
            traversal.len(),
            n + k
        ));
    }
    let mut seen = vec![false; n + k];
    for (l, &t) in traversal.iter().enumerate() {
        let in_range = if l < n {
            t < n
        } else {
            (n..n + k).contains(&t)
        };
        if !in_range || seen[t] {
            return Err(format!(
                "traversal_order {traversal:?} is not a valid order"
            ));
        }
        seen[t] = true;
    }
    if block_map.iter().any(|&d| d >= n) {
        return Err(format!(
            "block_map {block_map:?} names a dimension past rank {n}"
        ));
    }
    let metadata: Vec<fb::DimensionMetadata> = sp
        .dim_metadata()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    if metadata.len() != n + k {
        return Err(format!(
            "has {} dimension metadata entries for {} levels",
            metadata.len(),
            n + k
        ));
    }
    // Block sizes come from the dense levels that traverse the in-block dimensions.
    let mut block_size = vec![0usize; k];
    for (l, &t) in traversal.iter().enumerate().skip(n) {
        let m = &metadata[l];
        if m.format() != fb::DimensionType::DENSE || m.dense_size() <= 0 {
            return Err("block dimensions must be dense with a positive size".into());
        }
        block_size[t - n] = m.dense_size() as usize;
    }
    // The extent of each level: a grid dimension divided by its block size, or a block size.
    let mut extent = vec![0usize; n + k];
    for (l, &t) in traversal.iter().enumerate() {
        extent[l] = if t < n {
            let mut d = dims[t];
            for (b, &bd) in block_map.iter().enumerate() {
                if bd == t {
                    if !d.is_multiple_of(block_size[b]) {
                        return Err(format!(
                            "dimension {t} of size {} is not a multiple of its block size {}",
                            dims[t], block_size[b]
                        ));
                    }
                    d /= block_size[b];
                }
            }
            d
        } else {
            block_size[t - n]
        };
    }
    let mut levels = Vec::with_capacity(n + k);
    for (l, m) in metadata.iter().enumerate() {
        levels.push(match m.format() {
            fb::DimensionType::DENSE => {
                if usize::try_from(m.dense_size()).ok() != Some(extent[l]) {
                    return Err(format!(
                        "dense level {l} has size {}, expected {}",
                        m.dense_size(),
                        extent[l]
                    ));
                }
                Level::Dense(extent[l])
            }
            fb::DimensionType::SPARSE_CSR => Level::Sparse {
                segments: index_vector(
                    m.array_segments_as_int_32_vector(),
                    m.array_segments_as_uint_16_vector(),
                    m.array_segments_as_uint_8_vector(),
                    "array_segments",
                )?,
                indices: index_vector(
                    m.array_indices_as_int_32_vector(),
                    m.array_indices_as_uint_16_vector(),
                    m.array_indices_as_uint_8_vector(),
                    "array_indices",
                )?,
            },
            other => return Err(format!("level {l} has unknown format {}", other.0)),
        });
    }
    let total = dims.iter().try_fold(elem, |acc, &d| acc.checked_mul(d));
    let total = total.ok_or("the dense size overflows")?;
    let layout = Layout {
        dims,
        traversal,
        block_map,
        block_size,
        levels,
        extent,
    };
    let mut sink = Sink {
        elem,
        values,
        next_value: 0,
        out: vec![0u8; total],
    };
    let mut position = vec![0usize; n + k];
    layout.populate(&mut sink, 0, 0, &mut position)?;
    if sink.next_value * elem != values.len() {
        return Err(format!(
            "stores {} values but the encoding places {}",
            values.len() / elem.max(1),
            sink.next_value
        ));
    }
    Ok(sink.out)
}

impl Layout {
    fn populate(
        &self,
        sink: &mut Sink,
        level: usize,
        prev: usize,
        position: &mut Vec<usize>,
    ) -> Result<(), String> {
        let Some(current) = self.levels.get(level) else {
            return self.place(sink, position);
        };
        match current {
            Level::Dense(size) => {
                for i in 0..*size {
                    position[level] = i;
                    let next = prev
                        .checked_mul(*size)
                        .and_then(|p| p.checked_add(i))
                        .ok_or("position overflows")?;
                    self.populate(sink, level + 1, next, position)?;
                }
            }
            Level::Sparse { segments, indices } => {
                let (Some(&start), Some(&end)) = (segments.get(prev), segments.get(prev + 1))
                else {
                    return Err(format!(
                        "array_segments of level {level} has no segment {prev}"
                    ));
                };
                for i in start..end {
                    let index = *indices.get(i).ok_or_else(|| {
                        format!("segment entry {i} is past array_indices of level {level}")
                    })?;
                    if index >= self.extent[level] {
                        return Err(format!(
                            "index {index} of level {level} is out of range {}",
                            self.extent[level]
                        ));
                    }
                    position[level] = index;
                    self.populate(sink, level + 1, i, position)?;
                }
            }
        }
        Ok(())
    }

    /// Copies the next stored value to the dense position the traversal reached.
    fn place(&self, sink: &mut Sink, position: &[usize]) -> Result<(), String> {
        let n = self.dims.len();
        let mut original = vec![0usize; n];
        for (l, &t) in self.traversal.iter().enumerate() {
            if t < n {
                original[t] = position[l];
            }
        }
        for (l, &t) in self.traversal.iter().enumerate().skip(n) {
            let b = t - n;
            let d = self.block_map[b];
            original[d] = original[d] * self.block_size[b] + position[l];
        }
        let mut flat = 0usize;
        for (&i, &dim) in original.iter().zip(&self.dims) {
            if i >= dim {
                return Err(format!("places a value outside the tensor ({original:?})"));
            }
            flat = flat * dim + i;
        }
        let elem = sink.elem;
        let src = sink.next_value * elem;
        let value = sink
            .values
            .get(src..src + elem)
            .ok_or("the encoding places more values than are stored")?;
        let dst = flat * elem;
        sink.out[dst..dst + elem].copy_from_slice(value);
        sink.next_value += 1;
        Ok(())
    }
}
