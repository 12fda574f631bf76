//! The reader's decoding of baskets, checked on baskets built by hand.

use super::*;
use crate::error::BufError;
use crate::tree::{ElementInfo, LeafInfo};
use interpretation::Packing;

fn member(streamer_type: i32) -> BranchInfo {
    BranchInfo {
        class: "TBranchElement".into(),
        name: "Jet.PT".into(),
        title: String::new(),
        entries: 1,
        entry_offset_len: 40,
        leaves: vec![LeafInfo {
            class: "TLeafElement".into(),
            name: "Jet.PT".into(),
            title: "PT".into(),
            len: 1,
            len_type: 4,
            unsigned: false,
            count_leaf: Some("Jet_".into()),
            element_type: streamer_type,
        }],
        basket_bytes: Vec::new(),
        basket_entry: Vec::new(),
        basket_seek: Vec::new(),
        write_basket: 0,
        embedded: Vec::new(),
        element: Some(ElementInfo {
            class_name: "Jet".into(),
            clones_name: String::new(),
            class_version: 1,
            id: 3,
            kind: 31,
            streamer_type,
            count_branch: Some("Jet".into()),
            member: None,
        }),
        branches: Vec::new(),
    }
}

/// The big-endian bytes of the floats 1.5, -2.0 and 4.25.
fn three_floats() -> Vec<u8> {
    [1.5f32, -2.0, 4.25]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect()
}

/// `basket` decoded as `it` on its own: the bytes before its values, and what it gave.
fn decoded(basket: &mut Basket, it: Interpretation) -> Result<(usize, BranchData), BufError> {
    let mut out = BranchData {
        interpretation: it,
        bytes: Vec::new(),
        counts: Vec::new(),
    };
    decode(basket, it, None, &mut out).map(|skip| (skip, out))
}

#[test]
fn baskets_never_written_end_the_basket_table_and_the_embedded_ones_follow() {
    let mut b = member(5);
    b.write_basket = 3;
    b.basket_seek = vec![100, 0, 0];
    b.basket_bytes = vec![50, 0, 0];
    // Basket 1: no offset, said to hold entries 10 to 25 (kept inside the tree object).
    b.basket_entry = vec![0, 10, 25, 25];
    assert_eq!(b.normal_baskets(), 1);
    // A basket of no offset holding no entries does not end the table.
    b.basket_entry = vec![0, 10, 10, 10];
    assert_eq!(b.normal_baskets(), 3);
    // ROOT's recovered baskets: none of the table's was ever written.
    b.basket_seek = vec![0, 0, 0];
    b.basket_entry = vec![0, 1901, 1901, 1901];
    assert_eq!(b.normal_baskets(), 0);
}

#[test]
fn fixed_size_entries_are_read_without_offsets_that_cannot_be_used() {
    // Three floats, with an entry-offset table whose first offset lies inside the key
    // (uproot reads such a basket by its data alone; so does this reader).
    let data = three_floats();
    let bad = crate::tree::entry_offsets(&[0u8; 12], 3, 64, 12);
    assert_eq!(bad, Err("entry offset 0 inside the basket's key".into()));
    let basket = || Basket {
        data: data.clone(),
        start: 0,
        offsets: Some(Offsets::Starts(bad.clone())),
        entries: 3,
    };
    let read = |it: Interpretation| {
        decoded(&mut basket(), it).map(|(skip, out)| {
            assert_eq!(skip, 0, "a basket's own bytes");
            out
        })
    };
    let fixed = read(Interpretation::plain(Number::F32, Layout::Fixed(1))).expect("fixed");
    assert_eq!(fixed.to_f64(), vec![1.5, -2.0, 4.25]);
    assert_eq!(fixed.counts, vec![1, 1, 1]);
    // Entries of varying length cannot be cut without them: the reason is the error.
    let err = read(Interpretation::plain(Number::F32, Layout::Jagged)).expect_err("jagged");
    assert!(err.to_string().contains("inside the basket's key"), "{err}");
}

#[test]
fn a_basket_read_with_its_key_in_front_is_decoded_where_it_lies() {
    // Entries of 2, 0 and 1 floats and ROOT's table after a 70-byte key: a basket stored
    // uncompressed, as its record is read from the file.
    let keylen = 70;
    let values = three_floats();
    let border = values.len();
    let record = |starts: [i32; 3]| {
        let mut record = vec![0xAB; keylen];
        record.extend(&values);
        record.extend(4i32.to_be_bytes());
        for start in starts {
            record.extend((start + keylen as i32).to_be_bytes());
        }
        record
    };
    let read = |it: Interpretation, offsets: Option<Offsets>, data: Vec<u8>| {
        let mut basket = Basket {
            data,
            start: keylen,
            offsets,
            entries: 3,
        };
        let (skip, out) = decoded(&mut basket, it).expect("decoded");
        (skip, out.counts.clone(), out.bytes[skip..].to_vec())
    };
    // The record becomes the values, its key left in front, not copied away.
    let jagged = Interpretation::plain(Number::F32, Layout::Jagged);
    let table = Some(Offsets::Table { border, keylen });
    assert_eq!(
        read(jagged, table.clone(), record([0, 8, 8])),
        (keylen, vec![2, 0, 1], values.clone())
    );
    let fixed = Interpretation::plain(Number::F32, Layout::Fixed(1));
    let untabled = record([0, 4, 8])[..keylen + border].to_vec();
    assert_eq!(
        read(fixed, None, untabled),
        (keylen, vec![1, 1, 1], values.clone())
    );
    // Entries cut at their offsets, each decoded on its own: the key dropped first.
    assert_eq!(
        read(fixed, table, record([0, 4, 8])),
        (0, vec![1, 1, 1], values)
    );
}

#[test]
fn jagged_counts_from_the_written_table_match_those_from_starts() {
    // Entries of 2, 0 and 1 floats after a 70-byte key, then ROOT's table: a count and
    // each entry's start from the key's start, big-endian.
    let keylen = 70;
    let values = three_floats();
    let basket = |starts: [i32; 3], table: bool| {
        let mut data = values.clone();
        let (border, entries) = (data.len(), starts.len());
        let written = |s: &i32| (s + keylen as i32).to_be_bytes();
        let offsets = match table {
            true => {
                data.extend(4i32.to_be_bytes());
                data.extend(starts.iter().flat_map(written));
                Offsets::Table { border, keylen }
            }
            false => {
                let raw: Vec<u8> = starts.iter().flat_map(written).collect();
                Offsets::Starts(crate::tree::entry_offsets(&raw, entries, keylen, border))
            }
        };
        Basket {
            data,
            start: 0,
            offsets: Some(offsets),
            entries,
        }
    };
    let it = Interpretation::plain(Number::F32, Layout::Jagged);
    let read = |mut b: Basket| {
        decoded(&mut b, it).map(|(skip, out)| {
            assert_eq!(skip, 0, "a basket's own bytes");
            (out.counts.clone(), out.to_f64())
        })
    };
    let good = [0, 8, 8];
    let from_table = read(basket(good, true)).expect("from the table");
    assert_eq!(from_table, (vec![2, 0, 1], vec![1.5, -2.0, 4.25]));
    assert_eq!(Ok(from_table), read(basket(good, false)));
    // A start that goes back, one inside the key, one not on a value: each named as the
    // starts name it.
    for bad in [[0, 8, 4], [-4, 8, 8], [0, 6, 8]] {
        let err = read(basket(bad, true)).expect_err("a bad table");
        assert_eq!(Err(err), read(basket(bad, false)).map(|_| ()), "{bad:?}");
    }
}

#[test]
fn members_read_as_numbers_or_named_when_not() {
    let it = interpret(&member(5)).expect("a float member");
    assert_eq!((it.number, it.layout), (Number::F32, Layout::Jagged));
    assert_eq!(
        interpret(&member(15)).map(|i| i.layout),
        Ok(Layout::JaggedBits)
    );
    // Without the streamer info's member (its range), packed reals read as uproot reads
    // them: a Double32_t as a float, a Float16_t with 12 mantissa bits.
    let d32 = interpret(&member(9)).expect("a Double32_t member");
    assert_eq!(
        (d32.number, d32.packing),
        (Number::F64, Some(Packing::Float))
    );
    let f16 = interpret(&member(19)).expect("a Float16_t member");
    assert_eq!(
        (f16.number, f16.packing),
        (Number::F32, Some(Packing::Truncated { bits: 12 }))
    );
    let err = interpret(&member(61)).expect_err("not read");
    assert!(err.contains("object"), "{err}");
}

#[test]
fn values_in_parts_read_as_the_same_values_in_one_piece_of_memory() {
    // The floats 1.5, -2.0, 4.25 and 7.0 as two baskets hand them out: the second behind a
    // 3-byte key, and its last value not yet taken.
    let be = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_be_bytes()).collect() };
    let first = Arc::new(be(&[1.5, -2.0]));
    let mut second = vec![9, 9, 9];
    second.extend(be(&[4.25, 7.0, 8.0]));
    let it = Interpretation::plain(Number::F32, Layout::Jagged);
    let values = Values {
        interpretation: it,
        parts: vec![
            Part {
                bytes: Arc::clone(&first),
                range: 0..8,
            },
            Part {
                bytes: Arc::new(second),
                range: 3..11,
            },
        ],
        counts: vec![2, 0, 2],
    };
    assert_eq!(values.len(), 4);
    assert_eq!(values.to_f64(), vec![1.5, -2.0, 4.25, 7.0]);
    assert_eq!(values.to_i64(), vec![1, -2, 4, 7]);
    let whole = values.clone().into_data();
    assert_eq!(whole.bytes, be(&[1.5, -2.0, 4.25, 7.0]));
    assert_eq!(whole.counts, vec![2, 0, 2]);
    assert_eq!(whole.to_f64(), values.to_f64());
    // Cut inside the second part and after the first: the parts follow the counts.
    let mut rest = values.clone();
    let head = rest.split_to(2);
    assert_eq!(
        (head.counts.clone(), head.to_f64()),
        (vec![2, 0], vec![1.5, -2.0])
    );
    assert_eq!(
        (rest.counts.clone(), rest.to_f64()),
        (vec![2], vec![4.25, 7.0])
    );
    let mut rest = values.clone();
    let mut head = rest.split_to(1);
    let mut tail = rest.clone();
    let middle = tail.split_to(1);
    assert_eq!((middle.counts.clone(), middle.len()), (vec![0], 0));
    assert_eq!(tail.to_f64(), vec![4.25, 7.0]);
    // Joined again, they are what was cut.
    head.append(rest);
    assert_eq!(head.clone().into_data(), values.clone().into_data());
    let mut split = values.clone();
    let mut second = split.split_to(3);
    assert!(split.is_empty() && split.counts.is_empty());
    second.append(split);
    assert_eq!(second.into_data(), values.into_data());
    // Cut inside one part: both sides share its memory.
    let mut odd = Values {
        interpretation: it,
        parts: vec![Part {
            bytes: Arc::new(be(&[1.0, 2.0, 3.0])),
            range: 0..12,
        }],
        counts: vec![1, 2],
    };
    let one = odd.split_to(1);
    assert_eq!((one.to_f64(), odd.to_f64()), (vec![1.0], vec![2.0, 3.0]));
    // One part whose memory no one shares is moved out; shared, it is copied.
    let shared = Values::from(BranchData {
        interpretation: it,
        bytes: (*first).clone(),
        counts: vec![2],
    });
    let kept = shared.clone();
    assert_eq!(shared.into_data().bytes, *first);
    assert_eq!(kept.into_data().to_f64(), vec![1.5, -2.0]);
}
