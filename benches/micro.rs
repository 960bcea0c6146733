//! Micro-benchmarks of the pure per-command stages: codec, slot hashing, command lookup and
//! key positions, key rewrite. `cargo bench --bench micro`.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use smallvec::SmallVec;

use slotbridge::command::{CommandTable, KeyList};
use slotbridge::protocol::{encode, Limits, Proto, ReplyScanner, RequestDecoder};
use slotbridge::rewrite::{Forward, Layout};
use slotbridge::route::key_slot;

fn codec(c: &mut Criterion) {
    let get = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000012345\r\n".repeat(16);
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Elements(16));
    group.bench_function("decode 16 pipelined GETs", |b| {
        let mut decoder = RequestDecoder::new(Limits::default());
        b.iter(|| {
            let mut buf = BytesMut::from(&get[..]);
            while let Ok(Some(request)) = decoder.decode(&mut buf) {
                black_box(request);
            }
        })
    });
    let inline = b"SET \"key a\" 'value b'\r\n".repeat(16);
    group.bench_function("decode 16 inline SETs", |b| {
        let mut decoder = RequestDecoder::new(Limits::default());
        b.iter(|| {
            let mut buf = BytesMut::from(&inline[..]);
            while let Ok(Some(request)) = decoder.decode(&mut buf) {
                black_box(request);
            }
        })
    });
    let replies =
        b"$64\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n".repeat(16);
    group.bench_function("scan 16 bulk replies", |b| {
        let mut scanner = ReplyScanner::new(Limits::default());
        b.iter(|| {
            let mut at = 0;
            while let Ok(Some(len)) = scanner.next_frame_len(&replies[at..]) {
                at += len;
            }
            black_box(at)
        })
    });
    group.bench_function("encode 16 bulk replies", |b| {
        let mut out = BytesMut::with_capacity(2048);
        b.iter(|| {
            out.clear();
            for _ in 0..16 {
                encode::bulk(&mut out, b"value");
                encode::null(&mut out, Proto::Resp3);
            }
            black_box(out.len())
        })
    });
    group.finish();
}

fn routing(c: &mut Criterion) {
    let table = CommandTable::builtin();
    let get: [Bytes; 2] = [
        Bytes::from_static(b"get"),
        Bytes::from_static(b"key:000000012345"),
    ];
    let eval: Vec<Bytes> = ["EVAL", "return 1", "2", "{a}x", "{a}y", "arg"]
        .iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect();
    let mut group = c.benchmark_group("routing");
    group.bench_function("key_slot", |b| {
        b.iter(|| key_slot(black_box(b"key:000000012345")))
    });
    group.bench_function("key_slot hash tag", |b| {
        b.iter(|| key_slot(black_box(b"mybot:{ch:25}:r:chat-1")))
    });
    group.bench_function("lookup + keys GET", |b| {
        let mut keys: KeyList = SmallVec::new();
        b.iter(|| {
            let spec = table.lookup(black_box(&get)).unwrap();
            spec.keys(&get, &mut keys);
            black_box(keys.len())
        })
    });
    group.bench_function("lookup + keys EVAL", |b| {
        let mut keys: KeyList = SmallVec::new();
        b.iter(|| {
            let spec = table.lookup(black_box(&eval)).unwrap();
            spec.keys(&eval, &mut keys);
            black_box(keys.len())
        })
    });
    group.finish();
}

fn rewrite(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/botmesh-cluster-v1.yaml"
    );
    let layout = Layout::load(std::path::Path::new(path), &["mybot".to_string()]).unwrap();
    let mut group = c.benchmark_group("rewrite");
    group.bench_function("forward outside prefix", |b| {
        b.iter(|| {
            matches!(
                layout.forward(black_box(b"key:000000012345")),
                Forward::Outside
            )
        })
    });
    group.bench_function("forward chat record", |b| {
        b.iter(|| black_box(layout.forward(black_box(b"mybot:chat:chat-12345"))))
    });
    group.bench_function("forward message item", |b| {
        b.iter(|| black_box(layout.forward(black_box(b"mybot:msg:chat-1:m-000123"))))
    });
    group.bench_function("reverse chat record", |b| {
        b.iter(|| black_box(layout.reverse(black_box(b"mybot:{ch:25}:r:chat-1"))))
    });
    group.finish();
}

criterion_group!(benches, codec, routing, rewrite);
criterion_main!(benches);
