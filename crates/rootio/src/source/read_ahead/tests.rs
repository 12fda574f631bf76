//! The read-ahead's plans, groups and parts against fetches of a file in memory.

use super::*;

/// [`ReadAhead::read`] into `buf`: whether the bytes were served.
fn read_into(
    ahead: &ReadAhead,
    buf: &mut [u8],
    offset: u64,
    start: impl FnOnce(Unfetched),
) -> bool {
    let read = ahead.read(offset, buf.len(), start);
    if let Some(bytes) = &read {
        buf.copy_from_slice(bytes);
    }
    read.is_some()
}

/// A fetch of `file`'s bytes that counts its requests in `log`, answering each in pieces
/// of `piece` bytes.
fn fetch_of<'a>(
    file: &'a [u8],
    log: &'a Mutex<Vec<Vec<(u64, u64)>>>,
    piece: usize,
) -> impl Fetch + 'a {
    move |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
        log.lock().expect("lock").push(ranges.to_vec());
        sink.restart();
        let bytes: Vec<u8> = ranges
            .iter()
            .flat_map(|&(o, n)| file[o as usize..(o + n) as usize].to_vec())
            .collect();
        for part in bytes.chunks(piece) {
            sink.take(part.to_vec());
        }
        Ok(())
    }
}

#[test]
fn planned_ranges_are_served_from_one_fetch_of_their_group_and_others_are_not() {
    let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let ahead = ReadAhead::default();
    ahead.plan(vec![vec![(100, 50), (400, 10)], vec![(1000, 100)]]);
    let log = Mutex::new(Vec::new());
    // Answers in pieces of 7 bytes: reads spanning pieces are put together.
    let fetch = fetch_of(&file, &log, 7);
    let mut buf = [0u8; 5];
    for (offset, expect) in [
        (402, true),
        (120, true),
        (1050, true),
        (148, false),
        (0, false),
    ] {
        let served = read_into(&ahead, &mut buf, offset, |u| u.fetch(&fetch));
        assert_eq!(served, expect, "{offset}");
        if expect {
            assert_eq!(buf[..], file[offset as usize..offset as usize + 5]);
        }
    }
    // The first read fetched both groups at once; the others read what was fetched.
    assert_eq!(log.lock().expect("lock").len(), 2, "one fetch per group");
    // A group whose fetch failed serves nothing, and is not asked for again.
    ahead.plan(vec![vec![(0, 10)]]);
    let failing = |_: &[(u64, u64)], _: &mut Sink<'_>| Err(io::ErrorKind::TimedOut.into());
    assert!(!read_into(&ahead, &mut buf, 0, |u| u.fetch(failing)));
    assert!(!read_into(&ahead, &mut buf, 0, |u| u.fetch(&fetch)));
    assert_eq!(log.lock().expect("lock").len(), 2);
}

#[test]
fn a_read_within_one_part_of_the_answer_shares_it_and_one_across_parts_is_put_together() {
    let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let ahead = ReadAhead::default();
    ahead.plan(vec![vec![(1000, 3000)]]);
    let log = Mutex::new(Vec::new());
    // Answered in parts of 1000 bytes: 1000..2000, 2000..3000, 3000..4000.
    let fetch = fetch_of(&file, &log, 1000);
    let within = ahead.read(2100, 800, |u| u.fetch(&fetch)).expect("planned");
    assert!(matches!(within, Bytes::Shared(..)), "not copied");
    assert_eq!(within[..], file[2100..2900]);
    let across = ahead
        .read(1500, 2000, |_| panic!("fetched"))
        .expect("planned");
    assert!(matches!(across, Bytes::Owned(_)));
    assert_eq!(across[..], file[1500..3500]);
    assert_eq!(within.into_vec(), file[2100..2900]);
}

#[test]
fn an_answer_is_kept_cut_where_planned_reads_start_and_end() {
    let file: Vec<u8> = (0..=255u8).cycle().take(2_100_000).collect();
    let ahead = ReadAhead::default();
    // One request for three planned reads and a gap (as HTTP merges them); the second
    // read crosses where a piece of the answer would end were it not cut there.
    let reads = [
        (0u64, 700_000usize),
        (700_000, 700_000),
        (1_500_000, 600_000),
    ];
    const { assert!(PIECE < 700_000 && PIECE_MAX > 700_000) };
    let _lazily = ahead.plan_keeping(&reads, |new| {
        assert_eq!(new, reads);
        vec![vec![(0, 2_100_000)]]
    });
    let fetch = |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
        let (o, n) = (ranges[0].0 as usize, ranges[0].1 as usize);
        sink.read_from(&mut &file[o..o + n], n)
    };
    for (o, n) in reads {
        let got = ahead.read(o, n, |u| u.fetch(fetch)).expect("planned");
        assert!(
            matches!(got, Bytes::Shared(..)),
            "the read at {o} is one part"
        );
        assert_eq!(got[..], file[o as usize..o as usize + n]);
    }
}

#[test]
fn small_planned_reads_share_parts_of_the_answer_each_whole() {
    let file: Vec<u8> = (0..=255u8).cycle().take(2_000_000).collect();
    let ahead = ReadAhead::default();
    // 1,000 reads of 1,999 bytes, one byte apart, in one request.
    let reads: Vec<(u64, usize)> = (0..1000).map(|i| (i * 2000, 1999)).collect();
    let _lazily = ahead.plan_keeping(&reads, |_| vec![vec![(0, 2_000_000)]]);
    let fetch = |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
        sink.read_from(&mut &file[..], ranges[0].1 as usize)
    };
    for &(o, n) in &reads {
        let got = ahead.read(o, n, |u| u.fetch(fetch)).expect("planned");
        assert!(
            matches!(got, Bytes::Shared(..)),
            "the read at {o} is within one part"
        );
        assert_eq!(got[..], file[o as usize..o as usize + n]);
    }
    // Taken together into parts of about `PIECE`, not one part a read.
    let Plan { groups, .. } = &*ahead.plan.lock().expect("lock");
    let parts = groups[0].lock().parts.len();
    assert!(parts <= 2_000_000 / (PIECE - 2000) + 1, "{parts} parts");
}

#[test]
fn a_read_is_served_as_soon_as_its_bytes_arrive_and_a_retry_adds_nothing_twice() {
    let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let ahead = ReadAhead::default();
    ahead.plan(vec![vec![(0, 1000)]]);
    let (first_half, go_on) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    // A fetch that breaks after 600 bytes, then, tried again, sends the first 500 again
    // and stops until told to go on.
    let fetch = |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
        assert_eq!(ranges, [(0, 1000)]);
        sink.restart();
        sink.take(file[..600].to_vec());
        sink.restart();
        sink.take(file[..500].to_vec());
        first_half.wait();
        go_on.wait();
        sink.take(file[500..1000].to_vec());
        Ok(())
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 100];
            assert!(read_into(&ahead, &mut buf, 900, |u| u.fetch(fetch)));
            assert_eq!(buf[..], file[900..1000]);
        });
        first_half.wait();
        // The first 600 bytes are here while the rest is on its way.
        let mut early = [0u8; 200];
        assert!(read_into(&ahead, &mut early, 350, |_| panic!(
            "being fetched"
        )));
        assert_eq!(early[..], file[350..550]);
        go_on.wait();
    });
    let Plan { groups, .. } = &*ahead.plan.lock().expect("lock");
    assert_eq!(groups[0].lock().held, 1000, "nothing taken twice");
}

#[test]
fn bytes_fetched_with_the_open_are_served_and_the_rest_fetched_once() {
    let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let ahead = ReadAhead::default();
    let tail = ahead.keep_ends_fetched(file[..100].to_vec(), vec![(9_000, 1_000)]);
    let log = Mutex::new(Vec::new());
    let fetch = fetch_of(&file, &log, 300);
    let mut buf = [0u8; 10];
    assert!(read_into(&ahead, &mut buf, 50, |u| u.fetch(&fetch)));
    assert_eq!(buf[..], file[50..60]);
    assert!(log.lock().expect("lock").is_empty(), "the head was fetched");
    tail.fetch(&fetch);
    assert!(read_into(&ahead, &mut buf, 9_500, |u| u.fetch(&fetch)));
    assert_eq!(buf[..], file[9_500..9_510]);
    assert_eq!(*log.lock().expect("lock"), [vec![(9_000, 1_000)]]);
}

#[test]
fn a_file_s_ends_and_small_reads_are_kept_for_its_next_reader() {
    let file: Vec<u8> = (0..=255u8).cycle().take(1_000_000).collect();
    let log = Mutex::new(Vec::new());
    let fetch = fetch_of(&file, &log, 1000);
    let ahead = ReadAhead::default();
    ahead.keep_ends(ends(file.len() as u64));
    let mut buf = [0u8; 10];
    assert!(read_into(&ahead, &mut buf, 5, |u| u.fetch(&fetch)));
    // A reader's plan leaves the ends out, and replaces none of them.
    let _lazily = ahead.plan_keeping(&[(100, 10), (500_000, 100)], |r| {
        assert_eq!(r, [(500_000, 100)], "the ends are held already");
        vec![vec![(500_000, 100)]]
    });
    assert!(read_into(&ahead, &mut buf, 999_000, |u| u.fetch(&fetch)));
    assert!(read_into(&ahead, &mut buf, 500_010, |u| u.fetch(&fetch)));
    // A small read outside the plan is kept; a large one is not.
    ahead.keep_read(300_000, &file[300_000..300_117]);
    ahead.keep_read(400_000, &file[400_000..400_000 + KEPT_READ + 1]);
    ahead.drop_plan();
    // The next reader: the ends and the small read, without a request; the plan is gone.
    assert!(read_into(&ahead, &mut buf, 300_100, |_| panic!("kept")));
    assert_eq!(buf[..], file[300_100..300_110]);
    assert!(read_into(&ahead, &mut buf, 999_990, |_| panic!("kept")));
    assert!(!read_into(&ahead, &mut buf, 400_000, |_| panic!(
        "not kept"
    )));
    assert!(!read_into(&ahead, &mut buf, 500_010, |_| panic!("dropped")));
    assert_eq!(
        log.lock().expect("lock").len(),
        2,
        "the ends once, the plan once"
    );
}

#[test]
fn ends_whose_request_failed_are_asked_for_again_by_the_next_reader() {
    let file: Vec<u8> = (0..=255u8).cycle().take(1_000).collect();
    let ahead = ReadAhead::default();
    ahead.keep_ends(ends(file.len() as u64));
    let failing = |_: &[(u64, u64)], _: &mut Sink<'_>| Err(io::ErrorKind::TimedOut.into());
    let mut buf = [0u8; 10];
    assert!(!read_into(&ahead, &mut buf, 0, |u| u.fetch(failing)));
    assert!(!read_into(&ahead, &mut buf, 0, |_| panic!(
        "failed for this reader"
    )));
    ahead.drop_plan();
    let log = Mutex::new(Vec::new());
    assert!(read_into(&ahead, &mut buf, 0, |u| u.fetch(fetch_of(&file, &log, 64))));
    assert_eq!(buf[..], file[..10]);
}

#[test]
fn a_new_plan_keeps_what_was_fetched_of_its_ranges() {
    let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let log = Mutex::new(Vec::new());
    let fetch = fetch_of(&file, &log, 64);
    let one_each = |r: &[(u64, usize)]| r.iter().map(|&(o, n)| vec![(o, n as u64)]).collect();
    let ahead = ReadAhead::default();
    let _lazily = ahead.plan_keeping(&[(0, 100), (100, 100)], one_each);
    let mut buf = [0u8; 10];
    assert!(read_into(&ahead, &mut buf, 150, |u| u.fetch(&fetch)));
    // The window moves on: (100, 100) stays fetched, (200, 100) is new, (0, 100) goes.
    let _lazily = ahead.plan_keeping(&[(100, 100), (200, 100)], one_each);
    assert!(read_into(&ahead, &mut buf, 120, |u| u.fetch(&fetch)));
    assert!(read_into(&ahead, &mut buf, 250, |u| u.fetch(&fetch)));
    assert!(!read_into(&ahead, &mut buf, 50, |u| u.fetch(&fetch)));
    assert_eq!(
        *log.lock().expect("lock"),
        [vec![(100, 100)], vec![(200, 100)]],
        "each range fetched once; (0, 100) never needed"
    );
    assert_eq!(buf[..], file[250..260]);
}

#[test]
fn a_file_s_ends_are_read_first() {
    assert_eq!(ends(1000), [(0, 1000)]);
    assert_eq!(ends(1 << 20), [(0, ENDS), ((1 << 20) - ENDS, ENDS)]);
}
