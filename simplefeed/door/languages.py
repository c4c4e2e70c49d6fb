"""The language codes a link's ``hreflang`` may begin with.

They are the codes the W3C Feed Validator knows, from its ``iso639codes.py``. That file holds
ISO 639-1 and 639-2 codes, and ``x`` for private use. It is MIT licensed, Copyright (c) 2002
Sam Ruby and Mark Pilgrim. A tag that begins otherwise, such as ``qq`` or ``i-default``, draws
"hreflang must be an ISO-639 language code". The warning would stay on a page kept for good.
So the door refuses such a tag. The test ``tests/test_door.py`` holds this list equal to the
validator's.
"""

from __future__ import annotations

#: Lower case, because a tag's primary subtag is compared in lower case.
PRIMARY_LANGUAGES = frozenset(
    """
    aa aar ab abk ace ach ada ady ae af afa afh afr ain ak aka akk alb ale alg alt am amh an ang anp
    apa ar ara arc arg arm arn arp art arw as asm ast ath aus av ava ave awa ay aym az aze ba bad
    bai bak bal bam ban baq bas bat be bej bel bem ben ber bg bh bho bi bih bik bin bis bla bm bn
    bnt bo bod bos br bra bre bs btk bua bug bul bur byn ca cad cai car cat cau ce ceb cel ces ch
    cha chb che chg chi chk chm chn cho chp chr chu chv chy cmc co cop cor cos cpe cpf cpp cr cre
    crh crp cs csb cu cus cv cy cym cze da dak dan dar day de del den deu dgr din div doi dra dsb
    dua dum dut dv dyu dz dzo ee efi egy eka el ell elx en eng enm eo epo es est et eu eus ewe ewo
    fa fan fao fas fat ff fi fij fil fin fiu fj fo fon fr fra fre frm fro frr frs fry ful fur fy ga
    gaa gay gba gd gem geo ger gez gil gl gla gle glg glv gmh gn goh gon gor got grb grc gre grn gsw
    gu guj gv gwi gws ha hai hat hau haw he heb her hi hil him hin hit hmn hmo ho hr hrv hsb ht hu
    hun hup hy hye hz ia iba ibo ice id ido ie ig ii iii ijo ik iku ile ilo ina inc ind ine inh io
    ipk ira iro is isl it ita iu ja jav jbo jpn jpr jrb jv ka kaa kab kac kal kam kan kar kas kat
    kau kaw kaz kbd kg kha khi khm kho ki kik kin kir kj kk kl km kmb kn ko kok kom kon kor kos kpe
    kr krc krl kro kru ks ku kua kum kur kut kv kw ky la lad lah lam lao lat lav lb lez lg li lim
    lin lit ln lo lol loz lt ltz lu lua lub lug lui lun luo lus lv mac mad mag mah mai mak mal man
    mao map mar mas may mdf mdr men mg mga mh mi mic min mis mk mkd mkh ml mlg mlt mn mnc mni mno mo
    moh mol mon mos mr mri ms msa mt mul mun mus mwl mwr my mya myn myv na nah nai nap nau nav nb
    nbl nd nde ndo nds ne nep new ng nia nic niu nl nld nn nno no nob nog non nor nr nso nub nv nwc
    ny nya nym nyn nyo nzi oc oci oj oji om or ori orm os osa oss ota oto pa paa pag pal pam pan pap
    pau peo per phi phn pi pl pli pol pon por pra pro ps pt pus qaa qtz qu que raj rap rar rm rn ro
    roa roh rom ron ru rum run rup rus rw sa sad sag sah sai sal sam san sas sat sc scc scn sco scr
    sd se sel sem sg sga sgn sh shn si sid sin sio sit sk sl sla slk slo slv sm sma sme smi smj smn
    smo sms sn sna snd snk so sog som son sot spa sq sqi sr srd srn srp srr ss ssa ssw st su suk sun
    sus sux sv sw swa swe syr ta tah tai tam tat te tel tem ter tet tg tgk tgl th tha ti tib tig tir
    tiv tk tkl tl tlh tli tmh tn to tog ton tpi tr ts tsi tsn tso tt tuk tum tup tur tut tvl tw twi
    ty tyv udm ug uga uig uk ukr umb und ur urd uz uzb vai ve ven vi vie vo vol vot wa wak wal war
    was wel wen wln wo wol x xal xh xho xx yao yap yi yid yo yor ypk za zap zen zh zha zho znd zu
    zul zun
    """.split()  # noqa: SIM905 (a list literal of 693 strings reads worse)
)
