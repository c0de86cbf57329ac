//! Load generator for `scripts/bench.sh`: an echo server, and clients that
//! measure round-trip times, connection setup rate and idle-connection cost.
//!
//! ```text
//! bench_client server                        print the address, echo until stdin closes
//! bench_client rtt ADDR COUNT                64-byte round trips: "p50_us p99_us"
//! bench_client connrate ADDR SECONDS THREADS connect+1-byte echo+close: "conns_per_sec"
//! bench_client idle ADDR COUNT               open COUNT connections, one round trip each,
//!                                            print "ready", hold them until stdin closes
//! ```

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = || -> SocketAddr { args[1].parse().expect("ADDR") };
    match args.first().map(String::as_str) {
        Some("server") => server(),
        Some("rtt") => rtt(addr(), args[2].parse().expect("COUNT")),
        Some("connrate") => connrate(
            addr(),
            args[2].parse().expect("SECONDS"),
            args[3].parse().expect("THREADS"),
        ),
        Some("idle") => idle(addr(), args[2].parse().expect("COUNT")),
        _ => {
            eprintln!(
                "usage: bench_client server | rtt ADDR COUNT | connrate ADDR SECONDS THREADS | idle ADDR COUNT"
            );
            std::process::exit(2);
        }
    }
}

fn wait_stdin_closed() {
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
    }
}

fn server() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", l.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        tokio::task::spawn_blocking(wait_stdin_closed)
            .await
            .unwrap();
    });
}

fn rtt(addr: SocketAddr, count: usize) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let msg = [b'x'; 64];
    let mut buf = [0u8; 64];
    let mut times = Vec::with_capacity(count);
    for i in 0..count + count / 10 {
        let t = Instant::now();
        s.write_all(&msg).unwrap();
        s.read_exact(&mut buf).unwrap();
        // The first tenth warms caches and is not counted.
        if i >= count / 10 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    let p = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    println!("{:.1} {:.1}", p(0.5), p(0.99));
}

fn connrate(addr: SocketAddr, secs: f64, threads: usize) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let total: usize = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0;
                let mut b = [0u8; 1];
                while Instant::now() < deadline {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.write_all(b"x").unwrap();
                    s.read_exact(&mut b).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    println!("{:.0}", total as f64 / started.elapsed().as_secs_f64());
}

fn idle(addr: SocketAddr, count: usize) {
    let mut conns = Vec::with_capacity(count);
    let mut b = [0u8; 1];
    for i in 0..count {
        let mut s = match TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("connection {i}: {e}");
                std::process::exit(1);
            }
        };
        s.write_all(b"x").unwrap();
        s.read_exact(&mut b).unwrap();
        conns.push(s);
    }
    println!("ready");
    std::io::stdout().flush().unwrap();
    wait_stdin_closed();
    drop(conns);
}
