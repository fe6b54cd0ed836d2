// Java BookKeeper's client, driven line by line from stdin by bkeeper's interop tests
// (tests/interop/javabk.py). Run with the Java 17 source launcher, no build step:
//
//   java <JOPTS> -cp '../shared/javabk/jars/*:../shared/javabk/lib/*' InteropClient.java
//
// Every command is one line of words; every answer is one line, "@@ OK ..." or
// "@@ ERR <exception class> <code> <message>" (the "@@ " tells it from the log lines Java's
// logger prints on stdout too). Commands:
//
//   client NAME v2|v3 URI [tls PROVIDER VERIFY CA_PEM [CERT_PEM KEY_PEM]]
//                                          a BookKeeper client (ClientConfiguration); with
//                                          tls: START_TLS on every connection, PROVIDER
//                                          OpenSSL or JDK, VERIFY true|false (hostname
//                                          verification), a client certificate if given
//   client NAME v2|v3 URI delay-ensemble-change
//                                          the same with delayEnsembleChange=true: a write
//                                          that fails after its ack quorum changes nothing
//   create CLIENT DIGEST PASSWORD E QW QA  a new ledger, its writer kept: OK <ledger id>
//   append LEDGER FIRST COUNT SIZE         COUNT entries (FIRST.. expected ids, pipelined):
//                                          OK <last entry id>
//   close LEDGER                           close the writer: OK <last add confirmed>
//   read CLIENT LEDGER DIGEST PASSWORD recover|norecover
//                                          open, read every entry, close:
//                                          OK lac=<n> closed=<bool> sha256=<hex>
//   poll CLIENT LEDGER DIGEST PASSWORD ENTRY TIMEOUT_MS
//                                          open without recovery, long-poll the bookies for
//                                          ENTRY (readLastAddConfirmedAndEntry):
//                                          OK lac=<n> entry=<sha256 of its bytes, or none>
//   delete CLIENT LEDGER                   delete the ledger
//   quit
//
// DIGEST: CRC32, CRC32C, MAC or DUMMY. Entry e of ledger l holds "L<l>E<e>." repeated and cut
// to SIZE bytes; sha256 is over every entry read, each as a 4-byte big-endian length then
// its bytes (tests/interop/javabk.py computes the same).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class InteropClient {
    private final Map<String, BookKeeper> clients = new HashMap<>();
    private final Map<Long, LedgerHandle> writers = new HashMap<>();

    public static void main(String[] args) throws Exception {
        InteropClient agent = new InteropClient();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("@@ READY");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            if (words[0].equals("quit")) {
                break;
            }
            String answer;
            try {
                answer = "OK " + agent.run(words);
            } catch (Throwable e) {
                Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                int code = cause instanceof BKException ? ((BKException) cause).getCode() : 0;
                String message = String.valueOf(cause.getMessage()).replace('\n', ' ');
                answer = "ERR " + cause.getClass().getSimpleName() + " " + code + " " + message;
            }
            System.out.println("@@ " + answer);
            System.out.flush();
        }
        agent.shutdown();
    }

    private String run(String[] w) throws Exception {
        switch (w[0]) {
            case "client":
                return client(w);
            case "create": {
                BookKeeper bk = clients.get(w[1]);
                LedgerHandle lh = bk.createLedger(Integer.parseInt(w[4]), Integer.parseInt(w[5]),
                        Integer.parseInt(w[6]), digest(w[2]), w[3].getBytes(StandardCharsets.UTF_8));
                writers.put(lh.getId(), lh);
                return Long.toString(lh.getId());
            }
            case "append":
                return Long.toString(append(writers.get(Long.parseLong(w[1])), Long.parseLong(w[2]),
                        Integer.parseInt(w[3]), Integer.parseInt(w[4])));
            case "close": {
                LedgerHandle lh = writers.remove(Long.parseLong(w[1]));
                lh.close();
                return Long.toString(lh.getLastAddConfirmed());
            }
            case "read":
                return read(clients.get(w[1]), Long.parseLong(w[2]), digest(w[3]),
                        w[4].getBytes(StandardCharsets.UTF_8), w[5].equals("recover"));
            case "poll":
                return poll(clients.get(w[1]), Long.parseLong(w[2]), digest(w[3]),
                        w[4].getBytes(StandardCharsets.UTF_8), Long.parseLong(w[5]), Long.parseLong(w[6]));
            case "delete":
                clients.get(w[1]).deleteLedger(Long.parseLong(w[2]));
                return w[2];
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    private String client(String[] w) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(w[3]);
        conf.setUseV2WireProtocol(w[2].equals("v2"));
        conf.setAddEntryTimeout(30);
        conf.setReadEntryTimeout(30);
        conf.setZkTimeout(10_000);
        if (w.length == 5 && w[4].equals("delay-ensemble-change")) {
            conf.setDelayEnsembleChange(true);
        } else if (w.length > 4 && w[4].equals("tls")) {
            conf.setTLSProviderFactoryClass("org.apache.bookkeeper.tls.TLSContextFactory");
            conf.setTLSProvider(w[5]);
            conf.setHostnameVerificationEnabled(Boolean.parseBoolean(w[6]));
            conf.setTLSTrustStoreType("PEM");
            conf.setTLSTrustStore(w[7]);
            if (w.length > 9) {
                // Java's client sends its certificate only with tlsClientAuthentication=true.
                conf.setTLSClientAuthentication(true);
                conf.setTLSKeyStoreType("PEM");
                conf.setTLSCertificatePath(w[8]);
                conf.setTLSKeyStore(w[9]);
            }
        } else if (w.length > 4) {
            throw new IllegalArgumentException("unknown client option " + w[4]);
        }
        clients.put(w[1], new BookKeeper(conf));
        return w[1];
    }

    private static BookKeeper.DigestType digest(String name) {
        return BookKeeper.DigestType.valueOf(name);
    }

    static byte[] payload(long ledger, long entry, int size) {
        byte[] unit = ("L" + ledger + "E" + entry + ".").getBytes(StandardCharsets.US_ASCII);
        byte[] data = new byte[size];
        for (int i = 0; i < size; i++) {
            data[i] = unit[i % unit.length];
        }
        return data;
    }

    private static long append(LedgerHandle lh, long first, int count, int size) throws Exception {
        List<CompletableFuture<Long>> adds = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            adds.add(lh.appendAsync(payload(lh.getId(), first + i, size)));
        }
        long last = -1;
        for (int i = 0; i < count; i++) {
            long id = adds.get(i).get();
            if (id != first + i) {
                throw new IllegalStateException("entry " + (first + i) + " was given id " + id);
            }
            last = id;
        }
        return last;
    }

    private static String read(BookKeeper bk, long ledgerId, BookKeeper.DigestType digest, byte[] password,
                               boolean recover) throws Exception {
        LedgerHandle lh = recover ? bk.openLedger(ledgerId, digest, password)
                : bk.openLedgerNoRecovery(ledgerId, digest, password);
        try {
            boolean closed = lh.isClosed();
            long lac = closed ? lh.getLastAddConfirmed() : lh.readLastAddConfirmed();
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            if (lac >= 0) {
                Enumeration<LedgerEntry> entries = lh.readEntries(0, lac);
                long expected = 0;
                while (entries.hasMoreElements()) {
                    LedgerEntry entry = entries.nextElement();
                    if (entry.getEntryId() != expected++) {
                        throw new IllegalStateException("read entry " + entry.getEntryId());
                    }
                    byte[] data = entry.getEntry();
                    sha.update(ByteBuffer.allocate(4).putInt(data.length).array());
                    sha.update(data);
                }
                if (expected != lac + 1) {
                    throw new IllegalStateException("read " + expected + " entries, LAC " + lac);
                }
            }
            StringBuilder hex = new StringBuilder();
            for (byte b : sha.digest()) {
                hex.append(String.format("%02x", b));
            }
            return "lac=" + lac + " closed=" + closed + " sha256=" + hex;
        } finally {
            lh.close();
        }
    }

    private static String poll(BookKeeper bk, long ledgerId, BookKeeper.DigestType digest, byte[] password,
                               long entryId, long timeoutMs) throws Exception {
        LedgerHandle lh = bk.openLedgerNoRecovery(ledgerId, digest, password);
        try (org.apache.bookkeeper.client.api.LastConfirmedAndEntry found =
                     lh.readLastAddConfirmedAndEntry(entryId, timeoutMs, false)) {
            String entry = "none";
            if (found.hasEntry()) {
                MessageDigest sha = MessageDigest.getInstance("SHA-256");
                StringBuilder hex = new StringBuilder();
                for (byte b : sha.digest(found.getEntry().getEntryBytes())) {
                    hex.append(String.format("%02x", b));
                }
                entry = hex.toString();
            }
            return "lac=" + found.getLastAddConfirmed() + " entry=" + entry;
        } finally {
            lh.close();
        }
    }

    private void shutdown() throws Exception {
        for (BookKeeper bk : clients.values()) {
            bk.close();
        }
    }
}
